"""The fast byte-level BPE encoder gives the library's own encoding of every document."""

from __future__ import annotations

import math

import pytest
from tokenizers import AddedToken, Tokenizer, normalizers

from data_pipeline.cli import main as prepare_main
from data_pipeline.corpora import bytelevel, jsonl
from data_pipeline.corpora.subword import Subword

from .test_records import assert_split_is_the_library_encoding, write_jsonl

# Whitespace, letters, numbers and marks outside ASCII, contractions, runs of spaces.
EDGES = [
    "",
    "it's, they'll've 'd 'S  x   \t\n\r\n  ",
    "Ünïcødé — 東京\u00a0nbsp\u2028line\u3000wide ²³ ⅻ e\u0301 🙂\x1c\x1f\x85 ",
    "   leading and trailing   ",
    "1990s–2000s: 3.14 ½ ١٢٣ — «quotes» ‘single’ “double”",
]


def library_ids(tokenizer: Tokenizer, documents: list[str]) -> list[int]:
    return [i for d in documents for i in tokenizer.encode(d, add_special_tokens=False).ids]


def test_real_text_encodes_to_the_librarys_ids(wikitext103_articles, lm1b_sentences, monkeypatch):
    monkeypatch.setattr(bytelevel, "CACHE_ENTRIES", 500)  # the cache starts again many times
    documents = wikitext103_articles[:40] + lm1b_sentences[:2000] + EDGES
    subword = Subword.train_bpe(2000, iter(wikitext103_articles[40:80] + EDGES))
    assert subword.byte_level is not None
    encoded = subword.encode_documents(documents)
    assert encoded.ids.tolist() == library_ids(subword.tokenizer, documents)
    expected = [len(subword.tokenizer.encode(d, add_special_tokens=False)) for d in documents]
    assert encoded.lengths.tolist() == expected and not encoded.refused
    # Split where the library splits (a BPE rarely has merges across pre-tokens to show it).
    encoder, library = subword.byte_level, subword.tokenizer.pre_tokenizer
    for document in documents:
        pre_tokens = [encoder.byte_level(p) for p in encoder.classes.pre_tokens(document)]
        assert pre_tokens == [p for p, _ in library.pre_tokenize_str(document)]


def test_ascii_characters_are_in_the_librarys_classes():
    encoder = Subword.train_bpe(300, iter(["a b"])).byte_level
    probe = encoder.classes.probe
    for char in map(chr, range(128)):
        for before in bytelevel.PROBES.values():
            library = len(probe.pre_tokenize_str(before + char))
            assert len(encoder.classes.regex.findall(before + char)) == library, repr(char)


def test_a_character_of_no_class_leaves_its_document_to_the_library(lm1b_sentences):
    subword = Subword.train_bpe(300, iter(lm1b_sentences[:100]))
    with pytest.raises(TypeError, match="TextInputSequence must be str"):  # as the library
        subword.encode_documents([lm1b_sentences[0], "a lone surrogate \ud800 in JSON"])


def test_other_tokenizers_are_left_to_the_library(lm1b_sentences):
    trained = Subword.train_bpe(400, iter(lm1b_sentences[:500]))
    for change in (
        lambda t: setattr(t, "normalizer", normalizers.Lowercase()),
        lambda t: t.add_tokens([AddedToken("the year", normalized=False)]),
    ):
        tokenizer = Tokenizer.from_str(trained.json_text)
        change(tokenizer)
        other = Subword(tokenizer.to_str())
        assert other.byte_level is None
        documents = lm1b_sentences[500:700]
        assert other.encode_documents(documents).ids.tolist() == library_ids(tokenizer, documents)


def test_a_sampled_document_the_library_encodes_otherwise_stops_the_encoding(
    wikitext103_articles, monkeypatch
):
    subword = Subword.train_bpe(500, iter(wikitext103_articles[:20]))
    encoder = subword.byte_level
    monkeypatch.setattr(bytelevel, "CHECK_EVERY", 3)
    documents = ["the cat sat", "on the mat", "of the house"]
    encoder.encode(documents)  # the third is checked: it agrees
    encoder.cache[" house"] = (7,)  # an encoder that gets one pre-token wrong
    with pytest.raises(
        bytelevel.EncoderMismatch,
        match=r"disagree at token \d+ of a document "
        r"starting 'of the house'; prepare with TXL_LIBRARY_ENCODER=1",
    ):
        encoder.encode(documents)
    monkeypatch.setenv("TXL_LIBRARY_ENCODER", "1")  # the way out it names
    assert Subword(subword.json_text).byte_level is None


def chars(*ranges: tuple[int, int]) -> list[str]:
    return [chr(c) for a, b in ranges for c in range(a, b + 1)]


# Characters outside ASCII of each of the library's classes.
NEW_CHARACTERS = {
    "CJK letters": chars((0x4E00, 0x4E3F)),
    "Greek and Cyrillic letters": chars((0x3B1, 0x3C9), (0x430, 0x44F)),
    "numbers": chars((0x660, 0x669), (0x966, 0x96F), (0x2460, 0x247F)),
    "symbols": chars((0x2200, 0x223F)),
    "spaces": chars((0x2000, 0x200A), (0x3000, 0x3000), (0xA0, 0xA0), (0x2028, 0x2029)),
}


class Compiles:
    """Every compile of the encoder's regex, and the characters outside ASCII it held."""

    def __init__(self, monkeypatch):
        self.calls, self.characters = 0, 0
        compile_regex = bytelevel.CharClasses.compile

        def counted(classes):
            self.calls += 1
            self.characters += sum(len(m) for m in classes.members.values())
            return compile_regex(classes)

        monkeypatch.setattr(bytelevel.CharClasses, "compile", counted)

    def linear_in(self, characters: int) -> bool:
        """Compiles grow with the log of the characters met, what they hold with their number."""
        return self.calls <= 2 + math.log2(characters) and self.characters <= 2 * characters


@pytest.mark.parametrize("kind", NEW_CHARACTERS)
def test_a_new_character_in_every_batch_costs_no_recompile_each(
    tmp_path, lm1b_sentences, monkeypatch, kind
):
    monkeypatch.setattr(jsonl, "STREAM_RECORDS", 4)  # a batch of 4 records: many batches
    new = NEW_CHARACTERS[kind]
    documents = [
        f"{sentence} {new[k // 4]}x{new[k // 4]}5 " if k % 4 == 0 else sentence
        for k, sentence in enumerate(lm1b_sentences[: 4 * len(new)])
    ]
    write_jsonl(tmp_path / "src" / "train" / "news.jsonl.gz", documents)
    tokenizer = tmp_path / "tokenizer.json"
    Subword.train_bpe(400, iter(lm1b_sentences[-500:])).save(str(tokenizer))
    compiles = Compiles(monkeypatch)
    argv = ["--dataset", "jsonl", "--source", str(tmp_path / "src"), "--out", str(tmp_path / "out"),
            "--tokenizer", str(tokenizer), "--workers", "1", "--no-progress"]  # fmt: skip
    assert prepare_main(argv) == 0
    assert compiles.linear_in(len(new)), (compiles.calls, compiles.characters, len(new))
    assert_split_is_the_library_encoding(tmp_path / "out", "train", documents)


def test_characters_fed_one_call_each_are_split_as_the_library_splits(lm1b_sentences, monkeypatch):
    subword = Subword.train_bpe(400, iter(lm1b_sentences[:500]))
    compiles = Compiles(monkeypatch)
    new = [c for kind in NEW_CHARACTERS.values() for c in kind]
    documents = [f"{lm1b_sentences[k]} a{c}b {c}{c} 7{c}" for k, c in enumerate(new)]
    ids = [subword.encode_documents([d]).ids.tolist() for d in documents]
    assert ids == [library_ids(subword.tokenizer, [d]) for d in documents]
    assert compiles.linear_in(len(new)), (compiles.calls, compiles.characters, len(new))


def test_a_document_holding_a_special_tokens_text_is_encoded_as_the_library_does(lm1b_sentences):
    subword = Subword.train_bpe(400, iter(lm1b_sentences[:500]))
    assert subword.byte_level is not None  # its one added token is special: the fast encoder
    documents = [
        "a story.<|endoftext|>The next one",
        lm1b_sentences[600],
        "<|endoftext|>",
        " <|endoftext|> <|endoftext|>x",
    ]
    ids = subword.encode_documents(documents)
    assert ids.ids.tolist() == library_ids(subword.tokenizer, documents)
    assert ids.ids.tolist().count(subword.eos_id) == 4  # the library's: the token itself
    assert subword.decode(ids.ids[: ids.lengths[0]]) == documents[0]
