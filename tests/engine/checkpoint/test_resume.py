"""Resuming without a process group: finding the newest intact checkpoint, whether it can
continue this run, and memory rows across world sizes."""

import re

import pytest

from data_pipeline import manifest_url, prepare
from data_pipeline.streams import MixedStreams, MixSource
from tests.data_pipeline.corpora.test_records import write_jsonl
from tests.engine.checkpoint.on_disk import (
    NO_RECORD,
    damage_memory_file,
    fake_checkpoint,
    replace_record,
    state,
)
from txl_dist.engine import checkpoint
from txl_dist.engine.checkpoint import DamagedCheckpointError
from txl_dist.engine.checkpoint.parts import RunState
from txl_dist.engine.checkpoint.parts.memory import rows_of
from txl_dist.engine.checkpoint.parts.stream import StreamPart
from txl_dist.process.dist import World
from txl_dist.schema import ConfigError


def test_resume_auto_finds_latest_and_nothing_when_fresh(tmp_path):
    assert checkpoint.find_resume_point("auto", str(tmp_path)) is None
    fake_checkpoint(tmp_path / "checkpoints", 10, 2, 4)
    point = checkpoint.find_resume_point("auto", str(tmp_path))
    assert point.tag == "global_step10" and point.passed_over == []
    assert point.client == state(10, 2, files=point.client.files)
    assert sorted(point.client.files) == ["memory_rank0.pt", "memory_rank1.pt"]
    explicit = checkpoint.find_resume_point(str(tmp_path / "checkpoints/global_step10"), "unused")
    assert explicit.tag == "global_step10"
    with pytest.raises(FileNotFoundError, match="neither a checkpoint"):
        checkpoint.find_resume_point(str(tmp_path / "nowhere"), "unused")


def test_resume_auto_passes_over_damaged_checkpoints_to_the_newest_intact_one(tmp_path):
    ckpts = tmp_path / "checkpoints"
    for step in (10, 20, 30):
        fake_checkpoint(ckpts, step, 2, 4)
    fake_checkpoint(ckpts, 25, 2, 4, complete=False)
    (ckpts / checkpoint.LATEST).write_text("global_step30")
    damage_memory_file(ckpts / "global_step30")
    point = checkpoint.find_resume_point("auto", str(tmp_path))
    assert point.tag == "global_step20"
    damaged, incomplete = point.passed_over  # newest first
    assert re.fullmatch(
        rf"checkpoint {ckpts}/global_step30 is damaged: memory_rank1.pt has CRC-32 [0-9a-f]{{8}}, "
        r"txl.json records [0-9a-f]{8}: resuming from global_step20",
        damaged,
    )
    assert incomplete == (
        f"{ckpts}/global_step25/txl.json missing: checkpoint global_step25 is incomplete: "
        "resuming from global_step20"
    )
    # Named explicitly, a damaged checkpoint is an error, not a silent substitute.
    with pytest.raises(DamagedCheckpointError, match="global_step30 is damaged: memory_rank1"):
        checkpoint.find_resume_point(str(ckpts), "unused")

    (ckpts / "global_step20" / checkpoint.CLIENT_FILE).write_text('{"step": 2')  # cut short
    damage_memory_file(ckpts / "global_step10")
    with pytest.raises(DamagedCheckpointError) as err:
        checkpoint.find_resume_point("auto", str(tmp_path))
    message = str(err.value)  # the newest's damage, and that nothing else could stand in
    assert message.startswith(f"checkpoint {ckpts}/global_step30 is damaged: memory_rank1.pt")
    assert message.endswith(", and no earlier checkpoint is intact")


@pytest.mark.parametrize("new_world", [1, 2, 4])
def test_memories_follow_global_rows_across_world_sizes(tmp_path, new_world):
    fake_checkpoint(tmp_path, 5, world_size=2, rows_per_rank=4)
    point = checkpoint.find_resume_point(str(tmp_path), "unused")
    rows_per_rank = 8 // new_world
    for rank in range(new_world):
        rows, rng = rows_of(checkpoint.rank_states(point, "memory"), rows_per_rank, rank)
        first = rank * rows_per_rank
        assert rows[1][:, 0, 0].tolist() == [
            1000.0 + r for r in range(first, first + rows_per_rank)
        ]
        assert (rng is not None) == (new_world == 2)


def test_which_checkpoints_can_resume_this_run(tmp_path):
    point = checkpoint.ResumePoint(str(tmp_path), "global_step10", state(world_size=2))
    checkpoint.check_resumable(point, global_rows=8, vocab_sha256="ab" * 32)
    with pytest.raises(ConfigError, match="train.global_rows=8, this run has 16"):
        checkpoint.check_resumable(point, global_rows=16, vocab_sha256="ab" * 32)
    # data.path is null in a mix, and subword data is prepared with --tokenizer, not --vocab
    wrong = "vocabulary sha256 abababababab, this run's data has cdcdcd.*--tokenizer FILE"
    with pytest.raises(ConfigError, match=wrong):
        checkpoint.check_resumable(point, global_rows=8, vocab_sha256="cd" * 32)
    # Subword data re-prepared with another --eos-token (one tokenizer, so one sha256).
    ends = checkpoint.ResumePoint(str(tmp_path), "global_step10", state(eos_token="<|doc|>"))
    checkpoint.check_resumable(ends, global_rows=8, vocab_sha256="ab" * 32, eos_token="<|doc|>")
    wrong = "documents ending in '<|doc|>', this run's data ends them in '<|endoftext|>'"
    with pytest.raises(
        ConfigError, match=re.escape(wrong) + ".*" + re.escape("--eos-token '<|doc|>'")
    ):
        checkpoint.check_resumable(
            ends, global_rows=8, vocab_sha256="ab" * 32, eos_token="<|endoftext|>"
        )
    # Another world size loads ZeRO's partitioned optimizer only through the universal format.
    assert not checkpoint.needs_universal(None, world_size=1, zero_stage=2)
    assert not checkpoint.needs_universal(point, world_size=2, zero_stage=3)
    assert not checkpoint.needs_universal(point, world_size=1, zero_stage=0)
    assert checkpoint.needs_universal(point, world_size=1, zero_stage=1)


@pytest.fixture(scope="module")
def mix(shared_data, tmp_path_factory) -> list[MixSource]:
    """Two small real corpora with one BPE tokenizer (WikiText-2 lines, One Billion Word
    sentences), prepared: a mix of them."""
    root = tmp_path_factory.mktemp("mix")
    lines = (shared_data / "wikitext-2" / "valid.txt").read_text(encoding="utf-8").splitlines()
    news = shared_data / "one-billion-word" / "news.en.heldout-00000-of-00050.part1"
    text = {
        "wiki": [x for x in lines if x.strip()][:300],
        "news": news.read_text(encoding="utf-8").splitlines()[:300],
    }
    tokenizer = "bpe:300"
    for name, documents in text.items():
        write_jsonl(root / "src" / name / "train" / "docs.jsonl", documents)
        prepare("jsonl", str(root / name), str(root / "src" / name), tokenizer=tokenizer,
                progress=False)  # fmt: skip
        tokenizer = f"file://{root / 'wiki' / 'tokenizer.json'}"
    return [MixSource(n, manifest_url(str(root / n), "train"), 0.5) for n in text]


@pytest.mark.parametrize(
    "row,index,value,says",
    [(0, 0, -1, "rows[0][0] is -1"), (1, 1, 10**12, "rows[1][1] is 1000000000000"),
     (2, 3, 10**15, "rows[2][3] is 1000000000000000"), (3, 5, -(10**15), "rows[3][5] is -1")],
)  # fmt: skip
def test_a_mix_state_no_stream_can_stand_at_is_refused_naming_the_checkpoint_file(
    tmp_path, mix, row, index, value, says
):
    stream = MixedStreams(mix, 4, 20, seed=2)
    fake_checkpoint(tmp_path, 5, world_size=1, rows_per_rank=4)
    point = checkpoint.find_resume_point(str(tmp_path), "unused")
    saved = stream.state_dict()
    saved["rows"][row][index] = value
    point.client.parts["stream"] = saved
    part, run = StreamPart(stream), RunState(run_id="r1")
    with pytest.raises(DamagedCheckpointError) as refused:
        checkpoint.restore(point, False, [part], run, World(0, 1, 0))
    where = tmp_path / "global_step5" / checkpoint.CLIENT_FILE
    assert str(refused.value).startswith(f"{where}: parts.stream: stream state {says}")
    assert stream.state_dict() == stream.state_of(stream.row_states())  # still at its start


@pytest.mark.parametrize("kind", NO_RECORD)
def test_resume_auto_passes_over_a_checkpoint_without_a_readable_record(tmp_path, kind):
    ckpts = tmp_path / "checkpoints"
    for step in (20, 30):
        fake_checkpoint(ckpts, step, 2, 4)
    replace_record(ckpts / "global_step30", kind)
    point = checkpoint.find_resume_point("auto", str(tmp_path))
    assert point.tag == "global_step20"
    (passed_over,) = point.passed_over
    assert f"{ckpts}/global_step30" in passed_over and NO_RECORD[kind] in passed_over
    assert passed_over.endswith(": resuming from global_step20")
