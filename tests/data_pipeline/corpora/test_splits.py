"""Split discovery: which files of a source are train, valid and test, by each layout's rule."""

from __future__ import annotations

from data_pipeline.corpora.splits import Lm1bFiles, NamedFiles, TextFiles, splits_in

ROOT = "/src"
WIKITEXT = NamedFiles("wikitext", ("wiki.{}.tokens", "{}.txt"))


def under(*names: str) -> list[str]:
    return sorted(f"{ROOT}/{name}" for name in names)


def test_named_files_take_the_first_pattern_that_names_a_split():
    paths = under("a/wiki.train.tokens", "b/wiki.train.tokens", "valid.txt", "wiki.valid.tokens")
    paths += under("notes.txt")
    assert splits_in(WIKITEXT, paths, ROOT) == {
        "train": [f"{ROOT}/a/wiki.train.tokens"],  # the first of two
        "valid": [f"{ROOT}/wiki.valid.tokens"],  # the official name before {}.txt
    }


def test_lm1b_takes_every_training_shard_and_heldout_shard_0_as_valid_and_test():
    train = [f"training/news.en-{i:05d}-of-00100" for i in (1, 2)]
    heldout = [f"heldout/news.en.heldout-{i:05d}-of-00050" for i in (0, 1)]
    paths = under(*train, *heldout, "training/news.en-00001-of-00100.bak")
    assert splits_in(Lm1bFiles("lm1b"), paths, ROOT) == {
        "train": under(*train),
        "valid": [f"{ROOT}/{heldout[0]}"],
        "test": [f"{ROOT}/{heldout[0]}"],
    }
    assert splits_in(Lm1bFiles("lm1b"), under(*train), ROOT) == {"train": under(*train)}


def test_text_files_go_by_directory_then_by_name_else_all_are_train_but_hidden_ones():
    by_dir = under("train/a.txt", "train/b.txt", "valid/c.txt", "test_notes.txt")
    assert splits_in(TextFiles("text"), by_dir, ROOT) == {
        "train": under("train/a.txt", "train/b.txt"),
        "valid": under("valid/c.txt"),
    }
    by_name = under("my_train.txt", "my_test.txt", "other.txt")
    assert splits_in(TextFiles("text"), by_name, ROOT) == {
        "train": under("my_train.txt"),
        "test": under("my_test.txt"),
    }
    hidden = under(".done", "train/.DS_Store")  # our marker, an OS's dropping
    assert splits_in(TextFiles("text"), under("a.txt", "b.txt") + hidden, ROOT) == {
        "train": under("a.txt", "b.txt")
    }


def test_a_single_file_belongs_to_the_split_its_name_mentions():
    assert WIKITEXT.of_file("wiki.valid.tokens") == ["valid"]
    assert WIKITEXT.of_file("corpus.txt") == ["train"]
    assert Lm1bFiles("lm1b").of_file("news.en.heldout-00000-of-00050") == ["valid", "test"]
    assert Lm1bFiles("lm1b").of_file("news.en-00001-of-00100") == ["train"]
