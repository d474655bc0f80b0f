"""A loss reads as perplexity on word-level data and as bits per character on char-level data."""

import math

import pytest

from txl_dist.evaluation.scores import format_score, score, score_of


def test_char_level_loss_reads_as_bits_per_character_and_word_level_as_perplexity():
    assert score(math.log(2) * 1.25, "char") == {"bpc": pytest.approx(1.25)}
    assert score(math.log(30.0), "word") == {"ppl": pytest.approx(30.0)}
    assert score(math.log(30.0), "subword") == {"ppl": pytest.approx(30.0)}
    assert score(800.0, "word") == {"ppl": math.inf}  # a diverged run, not an OverflowError
    with pytest.raises(ValueError, match="data level 'byte' is not one of word, subword, char"):
        score(1.0, "byte")


def test_records_are_shown_with_the_score_they_hold():
    assert score_of({"loss": 1.0, "bpc": 1.44}) == ("bpc", 1.44)
    assert score_of({"loss": 1.0, "ppl": 2.72}) == ("ppl", 2.72)
    assert score_of({"loss": 1.0}) == ("ppl", None)
    assert format_score({"bpc": 1.06123}) == "bpc 1.0612"
    assert format_score({"ppl": 18.3456}, width=8, digits=3) == "ppl   18.346"
