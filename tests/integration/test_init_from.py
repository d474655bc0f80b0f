"""train.init_from on real runs: a run started from an export, then one started from that run's
checkpoint at ZeRO-3 on 2 ranks; each run's first loss is its source's loss on the same batch,
computed here with TransformerXL.from_pretrained (fp32, dropout 0)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from data_pipeline import TokenStreams, manifest_url
from tests.cli.startups import Ended, start_ups
from tests.conftest import REPO_ROOT
from tests.integration.runs import PROCESS_GROUP_BEGAN, command, records, train, train_losses
from txl_dist.cli.export import export
from txl_dist.config.loading import load_run_config
from txl_dist.model import TransformerXL, TXLConfig

# fp32 and no dropout: the first step's forward is the source model's, as from_pretrained's.
EXACT = ["deepspeed.bf16.enabled=false", "model.dropout=0.0", "model.dropatt=0.0"]
PLANTED = ("config.json", "metrics.jsonl")  # files a fresh run writes into its directory


def tiny_model(wikitext: Path) -> TXLConfig:
    config = load_run_config(str(REPO_ROOT / "configs" / "tiny.json"), [f"data.path={wikitext}"])
    return config.model


@pytest.fixture(scope="module")
def seed_export(wikitext, tmp_path_factory) -> Path:
    """The tiny model with weights of another seed than any run's, exported with the data's
    vocabulary (no training needed: its weights are simply not the run's own initial ones)."""
    out = tmp_path_factory.mktemp("seed") / "export"
    torch.manual_seed(5)
    model = TransformerXL(tiny_model(wikitext))
    model.save_pretrained(out, write_extra=lambda tmp: shutil.copy(wikitext / "vocab.txt", tmp))
    return out


def first_batch_loss(model_dir: Path, wikitext: Path) -> float:
    """The exported model's mean loss on the first training batch of a fresh run (8 rows of
    64 tokens, all ranks' rows together), its first segment without memory."""
    model = TransformerXL.from_pretrained(model_dir).eval()
    cfg = model.config
    streams = TokenStreams(
        manifest_url(str(wikitext), "train"), rows_per_rank=8, tgt_len=cfg.tgt_len, seed=1111
    )
    try:
        input_ids, targets = next(iter(streams))
    finally:
        streams.close()
    with torch.no_grad():
        return model(input_ids, targets).loss.float().mean().item()


@pytest.fixture(scope="module")
def from_export(wikitext, seed_export, tmp_path_factory) -> Path:
    """One process (ZeRO-1 in fp32) started from the seed export: 2 steps, in a directory where
    config.json and metrics.jsonl are links planted to files elsewhere."""
    out = tmp_path_factory.mktemp("from_export")
    for name in PLANTED:
        (out.parent / f"victim-{name}").write_text("precious\n")
        (out / name).symlink_to(out.parent / f"victim-{name}")
    train(
        out, wikitext, nprocs=1,
        overrides=[*EXACT, "train.max_steps=2", f"train.init_from={seed_export}"],
    )  # fmt: skip
    return out


def test_a_run_from_an_export_starts_at_the_exports_loss(wikitext, seed_export, from_export):
    first = train_losses(from_export)[1]
    expected = first_batch_loss(seed_export, wikitext)
    print(f"first loss {first!r}, export's loss on the same batch {expected!r}")
    assert first == pytest.approx(expected, rel=1e-6, abs=0)
    config = json.loads((from_export / "config.json").read_text())
    assert config["train"]["init_from"] == str(seed_export)


def test_a_fresh_run_writes_nothing_through_links_planted_in_its_directory(from_export):
    for name in PLANTED:
        assert (from_export.parent / f"victim-{name}").read_text() == "precious\n"
        assert not (from_export / name).is_symlink()
    assert records(from_export)[0]["step"] == 1


def test_its_export_says_where_it_came_from(from_export, seed_export, tmp_path):
    export(str(from_export), str(tmp_path / "export"))
    readme = (tmp_path / "export" / "README.md").read_text()
    # by its last part: where the files lay on the training machine is not the README's business
    assert "- initialized from: export \u2026/export (train.init_from)" in readme
    assert str(seed_export) not in readme and seed_export.name == "export"


def test_a_zero3_run_from_a_checkpoint_starts_at_that_checkpoints_loss(
    wikitext, from_export, tmp_path
):
    """2 ranks at ZeRO-3, from the checkpoint of a ZeRO-1 run; --resume auto with no
    checkpoint of its own yet starts from init_from, a second start resumes its own."""
    out = tmp_path / "run"
    overrides = [
        *EXACT,
        "deepspeed.zero_optimization.stage=3",
        "train.max_steps=1",
        f"train.init_from={from_export}",
    ]
    proc = train(out, wikitext, nprocs=2, overrides=overrides, resume="auto")
    assert f"initialized from checkpoint {from_export}/checkpoints/global_step2" in proc.stdout
    export(str(from_export), str(tmp_path / "source"))
    first, expected = train_losses(out)[1], first_batch_loss(tmp_path / "source", wikitext)
    print(f"ZeRO-3 first loss {first!r}, the source checkpoint's {expected!r}")
    # Two ranks' means of 4 rows each, averaged: the same sum in another order.
    assert first == pytest.approx(expected, rel=1e-5, abs=0)

    # A restart resumes the run's own checkpoint: init_from seeded step 0 only.
    steps = [o for o in overrides if not o.startswith("train.max_steps")]
    proc = train(out, wikitext, nprocs=2, overrides=[*steps, "train.max_steps=2"], resume="auto")
    assert "not loaded: resuming global_step1" in proc.stdout + proc.stderr
    assert [r["step"] for r in records(out) if "split" not in r] == [1, 2]


MISMATCHES = {
    "model.d_inner=256": "another architecture than this run's model section",
    "vocab.txt": "was trained with vocabulary sha256",
}


@pytest.fixture(scope="module")
def mismatched(wikitext, seed_export, tmp_path_factory) -> dict[str, tuple[Ended, Path]]:
    """{change: (how a start from a source with it ended, its train.out_dir)}, in one process
    (tests/cli/startups.py)."""
    cases, outs = [], []
    for change in MISMATCHES:
        root = tmp_path_factory.mktemp("mismatched")
        source, overrides = seed_export, []
        if change == "vocab.txt":  # the same size, two words swapped: another vocabulary
            source = root / "export"
            shutil.copytree(seed_export, source)
            lines = (source / "vocab.txt").read_text().splitlines(keepends=True)
            (source / "vocab.txt").write_text("".join([lines[1], lines[0], *lines[2:]]))
        else:
            overrides.append(change)
        overrides.append(f"train.init_from={source}")
        outs.append(root / "out")
        cases.append((command(root / "out", wikitext, 1, overrides, None)[2:], {}))
    return dict(zip(MISMATCHES, zip(start_ups(cases), outs)))


@pytest.mark.parametrize("change", MISMATCHES)
def test_a_mismatched_source_is_refused_in_one_line_before_any_process_group(mismatched, change):
    ended, out = mismatched[change]
    assert ended.returncode == 2, ended.stderr[-2000:]
    errors = [line for line in ended.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("config error: ") and not ended.process_stderr
    assert MISMATCHES[change] in errors[0]
    assert PROCESS_GROUP_BEGAN not in ended.stdout + ended.process_stdout
    assert not out.exists()  # no empty run directory left behind
