"""Checks before training: splits, vocabulary and out_dir, each one line naming the fix."""

import json
from pathlib import Path

import pytest

from data_pipeline.cli import main as prepare_main
from tests.conftest import REPO_ROOT
from txl_dist.config.loading import load_run_config
from txl_dist.engine.checkpoint.size import checkpoint_bytes
from txl_dist.process import preflight
from txl_dist.schema import ConfigError


@pytest.fixture(scope="module")
def data(shared_data, tmp_path_factory) -> Path:
    """Train and valid splits (no test split) of a few real WikiText-103 paragraphs."""
    root = tmp_path_factory.mktemp("preflight")
    (root / "src").mkdir()
    for split, lines in (("train", 40), ("valid", 20)):
        with open(shared_data / "wikitext-103" / f"wiki.{split}.tokens", encoding="utf-8") as f:
            (root / "src" / f"{split}.txt").write_text("".join(next(f) for _ in range(lines)))
    args = ["--dataset", "text", "--source", str(root / "src"), "--out", str(root / "data")]
    assert prepare_main([*args, "--no-progress"]) == 0
    return root / "data"


def prepared_variant(data: Path, name: str, lines_of) -> Path:
    """`data`'s text with each split's lines passed through `lines_of`, prepared at its own root."""
    root = data.parent / name
    (root / "src").mkdir(parents=True)
    for split in ("train", "valid"):
        lines = (data.parent / "src" / f"{split}.txt").read_text().splitlines(keepends=True)
        (root / "src" / f"{split}.txt").write_text("".join(lines_of(lines)))
    args = ["--dataset", "text", "--source", str(root / "src"), "--out", str(root / "data")]
    assert prepare_main([*args, "--no-progress"]) == 0
    return root / "data"


@pytest.fixture(scope="module")
def other_data(data) -> Path:
    """The same train text with its lines in reverse: a vocabulary of its own (another order)."""
    return prepared_variant(data, "other", lambda lines: reversed(lines))


@pytest.fixture(scope="module")
def fewer_words(data) -> Path:
    """The first half of the train text: a smaller vocabulary (another size, not only order)."""
    return prepared_variant(data, "fewer", lambda lines: lines[: len(lines) // 2])


def config(data: Path, out_dir: Path, *overrides: str):
    # The small vocabulary needs smaller clusters than the tiny config's.
    settings = [f"data.path={data}", f"train.out_dir={out_dir}", "model.cutoffs=[200,500]"]
    settings += overrides
    return load_run_config(str(REPO_ROOT / "configs" / "tiny.json"), settings)


def check_before_training(cfg) -> None:
    """The check as the pretrain command runs it, with the checkpoint size estimated."""
    return preflight.check_before_training(cfg, checkpoint_bytes(cfg))


def test_prepared_splits_and_a_writable_out_dir_pass(data, tmp_path):
    out_dir = tmp_path / "new" / "run"
    assert check_before_training(config(data, out_dir, "data.test_split=null")) is None
    assert out_dir.is_dir() and not list(out_dir.iterdir())  # made; its write probe left nothing
    cfg = config(data, out_dir, "data.test_split=null", "data.valid_split=null")
    assert check_before_training(cfg) is None  # every split but train may be null


def test_a_missing_split_names_the_setting_and_how_to_skip_it(data, tmp_path):
    with pytest.raises(ConfigError) as err:
        check_before_training(config(data, tmp_path / "run"))
    message = str(err.value)
    assert message.startswith("data.test_split=test: manifest ")
    assert message.endswith("or skip it with --set data.test_split=null") and "\n" not in message


def test_a_vocabulary_that_differs_from_the_model_is_refused(data, tmp_path):
    with pytest.raises(ConfigError, match=r"data.train_split=train: .*the model has 1000"):
        check_before_training(
            config(data, tmp_path / "run", "data.test_split=null", "model.n_token=1000")
        )


def test_an_out_dir_that_cannot_be_created_is_refused(data, tmp_path):
    (tmp_path / "file").write_text("not a directory")
    cfg = config(data, tmp_path / "file" / "run", "data.test_split=null")
    with pytest.raises(ConfigError, match=r"train.out_dir=.*file/run is not writable"):
        check_before_training(cfg)


def test_an_out_dir_without_room_for_one_checkpoint_is_refused(tmp_path):
    needs = (
        r"has too little room: one checkpoint needs about 1,125,899,906,842,624 bytes, [\d,]+ are"
    )
    with pytest.raises(ConfigError, match=needs):
        preflight.check_out_dir(str(tmp_path), 1024**5)
    preflight.check_out_dir(str(tmp_path), 1024)


def test_a_mix_checks_every_corpus_and_refuses_two_vocabularies(
    data, other_data, fewer_words, tmp_path
):
    def mix(second: Path) -> str:
        corpora = [{"name": "wiki", "path": str(data), "weight": 0.7}]
        corpora.append({"name": "again", "path": str(second), "weight": 0.3})
        return "data.mix=" + json.dumps(corpora)

    same = config(data, tmp_path / "run", "data.test_split=null", "data.path=null", mix(data))
    assert check_before_training(same) is None
    for second in (other_data, fewer_words):  # another order; another size, not an n_token hint
        other = config(
            data, tmp_path / "run", "data.test_split=null", "data.path=null", mix(second)
        )
        with pytest.raises(
            ConfigError, match=r"^data\.mix: corpora wiki and again have different vocab"
        ):
            check_before_training(other)
    missing = config(data, tmp_path / "run", "data.path=null", mix(data))
    with pytest.raises(ConfigError, match=r"^data\.test_split=test: manifest "):
        check_before_training(missing)
