"""Text to ids and back for each kind of export: words (an <eos> per line break), text8's
characters, a tokenizer.json's subwords; each starts from its line start (subwords: their
end-of-text token). A subword prompt is its own ids after it, and generated subwords come
out as text piece by piece, whole characters only."""

from __future__ import annotations

import json
import re

import pytest

from data_pipeline.corpora.subword import TOKENIZER_FILE, Subword
from data_pipeline.shards.errors import DataError
from data_pipeline.vocab import EOS, UNK_WIKI, Vocab
from tests.data_pipeline.corpora.test_subword import renamed_end_token
from txl_dist.exports.generation import INCOMPLETE
from txl_dist.exports.text import ExportText
from txl_dist.model.pretrained import VOCAB_FILE


def test_words_read_line_breaks_as_eos_and_lacking_words_as_unknown(tmp_path):
    Vocab([EOS, UNK_WIKI, "the", "cat", "sat"]).save(str(tmp_path / VOCAB_FILE))
    text = ExportText(str(tmp_path))
    ids, unknown = text.encode("the cat\nsat  on\n")
    assert ids.tolist() == [2, 3, 0, 4, 1, 0] and unknown == ["on"]
    assert text.start == [0]
    assert text.decode([2, 3, 0, 4]) == " the cat\nsat"


def test_text8_characters_start_after_a_space(tmp_path):
    Vocab(["a", "_", *"bcdefghijklmnopqrstuvwxyz"]).save(str(tmp_path / VOCAB_FILE))
    (tmp_path / "data.json").write_text(json.dumps({"dataset": "text8", "level": "char"}))
    text = ExportText(str(tmp_path))
    ids, unknown = text.encode("a cab")
    assert ids.tolist() == [0, 1, 3, 0, 2] and unknown == []
    assert text.start == [1]
    assert text.decode(ids.tolist()) == "a cab"


def test_a_tokenizer_json_gives_its_own_ids(tmp_path):
    docs = ["the cat sat on the mat\n", "a dog sat on a log\n"] * 20
    subword = Subword.train_bpe(300, iter(docs))
    subword.save(str(tmp_path / TOKENIZER_FILE))
    text = ExportText(str(tmp_path))
    ids, unknown = text.encode("the dog sat")
    expected = subword.tokenizer.encode("the dog sat", add_special_tokens=False).ids
    assert ids.tolist() == expected and unknown == []
    assert text.start == [text.eos] == [subword.eos_id]  # a request starts a document
    assert text.decode(ids.tolist()) == "the dog sat"


def test_a_custom_end_token_is_the_one_data_json_names(tmp_path):
    """Data prepared with --eos-token of any name: the export records it (data.json), and
    requests and prompts start after it, generation stops at it."""
    subword = Subword.train_bpe(300, iter(["the cat sat on the mat\n"] * 20))
    (tmp_path / TOKENIZER_FILE).write_text(renamed_end_token(subword, "<|doc_end|>"))
    assert ExportText(str(tmp_path)).eos is None  # no record: none of the known names
    (tmp_path / "data.json").write_text(json.dumps({"eos_token": "<|doc_end|>"}))
    text = ExportText(str(tmp_path))
    assert text.start == [text.eos] == [0] and text.subword.eos == "<|doc_end|>"
    assert text.prompt("the cat").tolist() == [0, *subword.encode("the cat")]
    (tmp_path / "data.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    named = re.escape("data.json names the end-of-text token '<|endoftext|>', which its")
    with pytest.raises(DataError, match=named):
        ExportText(str(tmp_path))


def test_a_tokenizer_json_without_an_end_of_text_token_starts_after_a_line_break(tmp_path):
    spec = json.loads(Subword.train_bpe(300, iter(["the cat sat on the mat\n"] * 20)).json_text)
    (eos,) = spec.pop("added_tokens")
    del spec["model"]["vocab"][eos["content"]]
    spec["model"]["vocab"] = {t: i - 1 for t, i in spec["model"]["vocab"].items()}
    (tmp_path / TOKENIZER_FILE).write_text(json.dumps(spec))
    text = ExportText(str(tmp_path))
    assert text.eos is None and text.start == text.subword.tokenizer.encode("\n").ids
    assert text.prompt("the cat").tolist() == text.encode("the cat")[0].tolist()


def test_a_subword_prompt_is_its_ids_and_generated_ids_come_out_as_whole_characters(tmp_path):
    docs = ["the cat sat on the mat\n", "a dog sat on a log\n"] * 20
    subword = Subword.train_bpe(300, iter(docs))  # ASCII only: other characters are bytes
    subword.save(str(tmp_path / TOKENIZER_FILE))
    text = ExportText(str(tmp_path))
    assert not text.words
    assert text.prompt("the dog").tolist() == [0, *text.encode("the dog")[0].tolist()]
    assert text.prompt("").tolist() == text.start == [subword.eos_id] == [0]
    generated = " naïve café — 日本\n the cat"
    ids = text.encode(generated)[0].tolist()
    # Some tokens are one byte of a character: the text of the ids up to there ends in U+FFFD.
    assert any(subword.decode(ids[:n]).endswith(INCOMPLETE) for n in range(len(ids)))
    pieces = list(text.pieces(iter(ids), prompt="the dog"))
    assert "".join(pieces) == generated
    assert not any(INCOMPLETE in piece for piece in pieces)


def test_a_tokenizer_json_encodes_whole_and_unpadded_and_refuses_dropout(tmp_path, caplog):
    """An export's tokenizer.json (txl-generate, txl-eval --text, the harness, the HF export):
    truncation and padding turned off with one warning naming it, a BPE dropout refused."""
    subword = Subword.train_bpe(300, iter(["the cat sat on the mat\n", "a dog sat\n"] * 20))
    spec = json.loads(subword.json_text)
    spec["truncation"] = {
        "direction": "Right",
        "max_length": 1,
        "strategy": "LongestFirst",
        "stride": 0,
    }
    spec["padding"] = {
        "strategy": {"Fixed": 64}, "direction": "Left", "pad_to_multiple_of": None,
        "pad_id": 0, "pad_type_id": 0, "pad_token": "a",
    }  # fmt: skip
    path = tmp_path / TOKENIZER_FILE
    path.write_text(json.dumps(spec))
    text = ExportText(str(tmp_path))
    assert text.encode("the dog sat")[0].tolist() == subword.encode("the dog sat")
    assert text.prompt("the cat").tolist() == [subword.eos_id, *subword.encode("the cat")]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path} sets truncation and padding: turned off, every document is encoded whole and "
        "unpadded"
    ]
    spec["model"]["dropout"] = 0.5
    path.write_text(json.dumps(spec))
    with pytest.raises(DataError, match=re.escape(f"{path}: model.dropout is 0.5: BPE dropout")):
        ExportText(str(tmp_path))
