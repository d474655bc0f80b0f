"""A tokenizer.json from elsewhere is checked before the library parses it: its components
(regular expressions only those of the tokenizers in wide use), its size and vocabulary, then
its ids; the library's panics are one line."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from data_pipeline.corpora.subword import Subword, library_errors
from data_pipeline.corpora.tokenizer_spec import KNOWN_PATTERNS
from data_pipeline.shards.errors import CorpusFormatError

from .test_records import (
    assert_split_is_the_library_encoding,
    one_line_error,
    run_prepare,
    split_tokens,
    write_jsonl,
)

# A pattern that takes time exponential in a word's length, and a harmless one no tokenizer in
# wide use has (one that makes the library run out of memory refuses just the same).
CUBIC, UNKNOWN = r"(?:\w|\w\w)*\d", r"[A-Z][a-z]+"


@pytest.fixture
def source(tmp_path, lm1b_sentences) -> Path:
    write_jsonl(tmp_path / "src" / "train" / "news.jsonl", lm1b_sentences[:200])
    return tmp_path / "src"


def edited(tokenizer_file: str, tmp_path: Path, edit) -> str:
    """A copy of the tokenizer file with ``edit(spec)`` applied to its JSON."""
    spec = json.loads(Path(tokenizer_file).read_text())
    edit(spec)
    path = tmp_path / "edited" / "tokenizer.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(spec))
    return str(path)


def split(pattern: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


def replace(pattern: str) -> dict:
    return {"type": "Replace", "pattern": {"Regex": pattern}, "content": " "}


def byte_level(spec: dict) -> dict:
    return spec["pre_tokenizer"]


# (edit of the spec, the key the refusal names)
REGEXES = {
    "a Split": (lambda s: s.update(pre_tokenizer=split(CUBIC)), "pre_tokenizer.pattern"),
    "a Split in a Sequence": (
        lambda s: s.update(
            pre_tokenizer={"type": "Sequence", "pretokenizers": [byte_level(s), split(UNKNOWN)]}
        ),
        r"pre_tokenizer.pretokenizers[1].pattern",
    ),
    "a normalizer's Replace": (lambda s: s.update(normalizer=replace(CUBIC)), "normalizer.pattern"),
    "a decoder's Replace": (
        lambda s: s.update(decoder={"type": "Sequence", "decoders": [replace(UNKNOWN)]}),
        "decoder.decoders[0].pattern",
    ),
}


@pytest.mark.parametrize("payload", REGEXES)
def test_a_regex_of_no_known_tokenizer_is_refused_before_parsing(
    tmp_path, source, tokenizer_file, capsys, payload
):
    edit, key = REGEXES[payload]
    tokenizer = edited(tokenizer_file, tmp_path, edit)
    options = ["--dataset", "jsonl", "--tokenizer", tokenizer, "--skip-bad-records"]
    assert run_prepare(source, tmp_path / "out", *options) == 2
    error = one_line_error(capsys)
    assert f"tokenizer.json: {key} is the regular expression " in error
    assert "set TXL_TRUST_TOKENIZER=1 only for a file you trust" in error


def test_a_trusted_regex_is_accepted(tmp_path, source, tokenizer_file, lm1b_sentences, monkeypatch):
    tokenizer = edited(
        tokenizer_file,
        tmp_path,
        lambda s: s.update(
            pre_tokenizer={"type": "Sequence", "pretokenizers": [split(r"[,;]"), byte_level(s)]}
        ),
    )
    monkeypatch.setenv("TXL_TRUST_TOKENIZER", "1")
    assert (
        run_prepare(source, tmp_path / "out", "--dataset", "jsonl", "--tokenizer", tokenizer) == 0
    )
    assert_split_is_the_library_encoding(tmp_path / "out", "train", lm1b_sentences[:200])


def test_the_known_patterns_are_accepted(tmp_path, source, lm1b_sentences):
    for k, pattern in enumerate(KNOWN_PATTERNS):
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        trainer = trainers.BpeTrainer(
            vocab_size=300, initial_alphabet=alphabet, show_progress=False,
            special_tokens=["</s>"],
        )  # fmt: skip
        tokenizer.train_from_iterator(lm1b_sentences[:300], trainer)
        tokenizer.decoder = decoders.ByteLevel()
        tokenizer.save(str(tmp_path / f"{k}.json"))
        options = ["--dataset", "jsonl", "--tokenizer", str(tmp_path / f"{k}.json")]
        assert run_prepare(source, tmp_path / f"out{k}", *options) == 0, pattern
        assert_split_is_the_library_encoding(tmp_path / f"out{k}", "train", lm1b_sentences[:200])


@pytest.mark.parametrize(
    "edit, refusal",
    [
        (
            lambda s: s.update(pre_tokenizer={"type": "Custom"}),
            "pre_tokenizer is 'Custom', which txl-dist does not accept; accepted: BertPreTokenizer",
        ),
        (
            lambda s: s.update(decoder={"type": "Sequence", "decoders": ["ByteLevel"]}),
            "decoder.decoders[0] is None, which txl-dist does not accept",
        ),
        (
            lambda s: s["model"].update(type="Python"),
            "model is 'Python', which txl-dist does not accept; accepted: BPE, Unigram",
        ),
    ],
)
def test_components_outside_the_allow_list_are_refused(
    tmp_path, source, tokenizer_file, capsys, edit, refusal
):
    tokenizer = edited(tokenizer_file, tmp_path, edit)
    assert (
        run_prepare(source, tmp_path / "out", "--dataset", "jsonl", "--tokenizer", tokenizer) == 2
    )
    assert f"tokenizer.json: {refusal}" in one_line_error(capsys)


@pytest.mark.parametrize(
    "variable, value, refusal",
    [
        ("TXL_MAX_TOKENIZER_BYTES", "2000", "holds more than TXL_MAX_TOKENIZER_BYTES=2000 bytes"),
        (
            "TXL_MAX_VOCAB_SIZE",
            "300",
            "model.vocab holds 400 entries, more than TXL_MAX_VOCAB_SIZE=300",
        ),
    ],
)
def test_a_tokenizer_over_the_caps_is_refused(
    tmp_path, source, tokenizer_file, monkeypatch, capsys, variable, value, refusal
):
    monkeypatch.setenv(variable, value)
    options = ["--dataset", "jsonl", "--tokenizer", tokenizer_file]
    assert run_prepare(source, tmp_path / "out", *options) == 2
    assert f"tokenizer.json {refusal}" in one_line_error(capsys).replace(": model", " model")


def moved(spec: dict, token: str, new_id: int) -> None:
    spec["model"]["vocab"][token] = new_id


@pytest.mark.parametrize(
    "edit, found",
    [
        (lambda s: moved(s, "a", 1_000_000), "400 distinct ids in 0..1000000"),  # a gap
        (lambda s: moved(s, "a", 5), "399 distinct ids in 0..399"),  # an id twice
        (
            lambda s: s["model"].update(vocab={t: i + 1 for t, i in s["model"]["vocab"].items()}),
            "400 distinct ids in 1..400",
        ),  # fmt: skip
    ],
)
def test_token_ids_must_be_the_rows_of_the_embedding(
    tmp_path, source, tokenizer_file, capsys, edit, found
):
    tokenizer = edited(tokenizer_file, tmp_path, edit)
    assert (
        run_prepare(source, tmp_path / "out", "--dataset", "jsonl", "--tokenizer", tokenizer) == 2
    )
    error = one_line_error(capsys)
    assert "tokenizer.json: its 400 tokens must have the ids 0..399, found " in error, error
    assert found in error, error
    assert not (tmp_path / "out" / "train").exists()


PADDING = {
    "direction": "Right",
    "pad_to_multiple_of": None,
    "pad_id": 0,
    "pad_type_id": 0,
    "pad_token": "a",
}
TRUNCATION = {"direction": "Right", "strategy": "LongestFirst", "stride": 0}
# Encoding settings a tokenizer.json may hold (the key the warning names): each changed what
# txl-prepare wrote, silently; the huge fixed padding aborted a worker and left it hanging.
SETTINGS = {
    "truncation to 1 token": ({"truncation": {**TRUNCATION, "max_length": 1}}, "truncation"),
    "a fixed padding": ({"padding": {**PADDING, "strategy": {"Fixed": 20000}}}, "padding"),
    "a huge fixed padding": ({"padding": {**PADDING, "strategy": {"Fixed": 10**12}}}, "padding"),
    "both": (
        {
            "truncation": {**TRUNCATION, "max_length": 3},
            "padding": {**PADDING, "strategy": "BatchLongest"},
        },
        "truncation and padding",
    ),
}


@pytest.mark.parametrize("setting", SETTINGS)
def test_truncation_and_padding_are_turned_off_with_one_warning(
    tmp_path, source, tokenizer_file, lm1b_sentences, caplog, setting
):
    settings, named = SETTINGS[setting]
    tokenizer = edited(tokenizer_file, tmp_path, lambda s: s.update(settings))
    options = ["--dataset", "jsonl", "--tokenizer", tokenizer, "--workers", "2"]
    with caplog.at_level(logging.WARNING):
        assert run_prepare(source, tmp_path / "out", *options) == 0
    warned = [r.getMessage() for r in caplog.records if "turned off" in r.getMessage()]
    assert warned == [
        f"{tokenizer} sets {named}: turned off, every document is encoded whole and unpadded"
    ]
    library = Tokenizer.from_file(tokenizer_file)  # the file as it was, without the setting
    eos = library.token_to_id("<|endoftext|>")
    expected = [i for d in lm1b_sentences[:200] for i in library.encode(d).ids + [eos]]
    assert split_tokens(tmp_path / "out", "train").tolist() == expected


@pytest.mark.parametrize("dropout", [0.9, 1e-9])
def test_a_bpe_dropout_is_refused(tmp_path, source, tokenizer_file, capsys, dropout):
    tokenizer = edited(tokenizer_file, tmp_path, lambda s: s["model"].update(dropout=dropout))
    options = ["--dataset", "jsonl", "--tokenizer", tokenizer]
    assert run_prepare(source, tmp_path / "out", *options) == 2
    error = one_line_error(capsys)
    assert (
        f"tokenizer.json: model.dropout is {dropout!r}: BPE dropout segments text at random"
        in error
    )
    assert "set it to null" in error and not (tmp_path / "out" / "train").exists()


def test_a_panic_of_the_library_is_one_error(lm1b_sentences):
    spec = json.loads(Subword.train_bpe(300, iter(lm1b_sentences[:100])).json_text)
    spec["post_processor"] = {
        "type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[X]", "type_id": 0}}],
        "pair": [], "special_tokens": {},
    }  # fmt: skip
    tokenizer = Tokenizer.from_str(json.dumps(spec))
    panicked = r"^encoding: the tokenizers library panicked \(no entry found for key\)$"
    with pytest.raises(CorpusFormatError, match=panicked), library_errors("encoding"):
        tokenizer.encode("a text")  # a panic: the template's [X] has no entry
