"""Subword tokenizers: byte-level BPE trained on real text round-trips every document exactly."""

from __future__ import annotations

import json
import pickle
import re

import pytest

from data_pipeline.corpora.subword import Subword, bpe_size
from data_pipeline.shards.errors import CorpusFormatError


def test_byte_level_bpe_round_trips_real_text_exactly(wikitext103_articles, lm1b_sentences):
    documents = wikitext103_articles[:60] + lm1b_sentences[:2000]
    tokenizer = Subword.train_bpe(600, iter(documents))
    assert len(tokenizer) == 600
    encoded = tokenizer.encode_documents(documents)
    ids, lengths = encoded.ids, encoded.lengths
    assert lengths.sum() == len(ids) and len(lengths) == len(documents)
    assert ids.max() < len(tokenizer)
    starts = [0, *lengths.cumsum().tolist()]
    for k, document in enumerate(documents):
        assert tokenizer.decode(ids[starts[k] : starts[k + 1]]) == document
    # Text the training never saw, down to bytes outside its alphabet, comes back too.
    unseen = "Ünïcødé — 東京 \t\r\n  emoji 🙂 and trailing spaces  "
    assert tokenizer.decode(tokenizer.encode_documents([unseen]).ids) == unseen


def test_a_saved_tokenizer_loads_as_the_same_tokenizer(tmp_path, lm1b_sentences):
    tokenizer = Subword.train_bpe(300, iter(lm1b_sentences[:500]))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    loaded = Subword.load(f"file://{tmp_path}/tokenizer.json")
    assert loaded.sha256 == tokenizer.sha256 and len(loaded) == 300


def test_a_file_that_is_no_tokenizer_is_refused_by_name(tmp_path):
    (tmp_path / "vocab.txt").write_text("the 3\nof 2\n")
    with pytest.raises(CorpusFormatError, match=r"vocab\.txt is not a tokenizers tokenizer\.json"):
        Subword.load(str(tmp_path / "vocab.txt"))


@pytest.mark.parametrize("spec", ["bpe:", "bpe:x", "bpe:100"])
def test_bpe_sizes_that_cannot_be_trained_are_refused(spec):
    with pytest.raises(ValueError, match="N must be a number of tokens above the 256 bytes"):
        bpe_size(spec)


def test_a_tokenizer_file_is_no_bpe_size():
    assert bpe_size("s3://bucket/tokenizer.json") is None and bpe_size("bpe:32000") == 32000


def test_bpe_trains_with_its_end_of_text_token_and_a_file_names_its_own(lm1b_sentences):
    trained = Subword.train_bpe(300, iter(lm1b_sentences[:500]))
    assert (trained.eos, trained.eos_id, len(trained)) == ("<|endoftext|>", 0, 300)
    assert trained.require_eos("t.json") is trained
    assert pickle.loads(pickle.dumps(trained)).eos_id == 0  # as workers get it
    # A file's own end-of-text token, by its name; --eos-token names any of its tokens.
    renamed = Subword(renamed_end_token(trained, "</s>"))
    assert (renamed.eos, renamed.eos_id) == ("</s>", 0)
    named = Subword(trained.json_text, "t.json", eos="\u0120the")
    assert named.eos_id == trained.tokenizer.token_to_id("\u0120the")
    with pytest.raises(CorpusFormatError, match="--eos-token 'the end': t.json has no such"):
        Subword(trained.json_text, "t.json", eos="the end")


def renamed_end_token(subword: Subword, name: str) -> str:
    """The tokenizer.json of `subword` with its end-of-text token renamed `name`, same id."""
    spec = json.loads(subword.json_text)
    (entry,) = [t for t in spec["added_tokens"] if t["content"] == subword.eos]
    entry["content"] = name
    spec["model"]["vocab"][name] = spec["model"]["vocab"].pop(subword.eos)
    return json.dumps(spec)


def test_a_record_names_an_end_token_of_any_name(lm1b_sentences):
    """What a manifest, checkpoint or export records as the end token is the one taken, named
    as the data was prepared (--eos-token), not by the known names."""
    custom = Subword(renamed_end_token(Subword.train_bpe(300, iter(lm1b_sentences[:500])), "<|x|>"))
    assert custom.eos is None  # none of the known names
    ended = custom.ending_with("<|x|>", "txl.json")
    assert (ended.eos, ended.eos_id, custom.eos) == ("<|x|>", 0, None)
    assert custom.ending_with(None, "txl.json") is custom  # no record: as it is
    with pytest.raises(CorpusFormatError) as err:
        custom.ending_with("<|gone|>", "e/data.json")
    assert str(err.value) == (
        "e/data.json names the end-of-text token '<|gone|>', which its tokenizer.json lacks: not "
        "the tokenizer its data was prepared with; restore that one"
    )


def test_the_refusals_hint_adds_an_end_of_text_token_that_is_then_used(lm1b_sentences):
    spec = json.loads(Subword.train_bpe(300, iter(lm1b_sentences[:500])).json_text)
    (eos,) = spec.pop("added_tokens")
    del spec["model"]["vocab"][eos["content"]]
    spec["model"]["vocab"] = {t: i - 1 for t, i in spec["model"]["vocab"].items()}
    bare = Subword(json.dumps(spec), "bare.json")
    with pytest.raises(CorpusFormatError, match="bare.json has no end-of-text token") as err:
        bare.require_eos("bare.json")
    hint = re.search(r"\((\{.*\})\)$", str(err.value)).group(1)
    spec["added_tokens"] = [json.loads(hint)]  # the entry the line says to add
    fixed = Subword(json.dumps(spec), "fixed.json").require_eos("fixed.json")
    assert (fixed.eos, fixed.eos_id, len(fixed)) == ("<|endoftext|>", 299, 300)
    assert fixed.byte_level is not None  # still the fast encoder's kind
