"""The loop's order of train steps, logs, evaluations, saves and stops, with fake parts.

One process, no DeepSpeed: a fake engine, a list-backed stream, a stop request that fires at a
chosen step, evaluation that only records that it happened, and the real Checkpointer's schedule
and state with a write that only records them.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import REPO_ROOT
from txl_dist.config.loading import load_run_config
from txl_dist.engine import checkpoint
from txl_dist.engine.checkpoint import Checkpointer, CheckpointState, RunState
from txl_dist.engine.checkpoint.parts import DeepSpeedPart, RunPart, SeenTokens, StreamPart
from txl_dist.engine.health.guard import SpikeGuard
from txl_dist.engine.health.monitor import Health
from txl_dist.engine.health.nonfinite import NonFinite, NonFiniteLossError
from txl_dist.engine.health.record import SpikeRecord
from txl_dist.engine.health.spikes import SpikeDetector
from txl_dist.engine.health.stragglers import StragglerDetector
from txl_dist.engine.memory import MemoryBank
from txl_dist.engine.metrics import Metrics
from txl_dist.engine.profiling import OutOfDeviceMemoryError
from txl_dist.engine.schedule import lr_multiplier
from txl_dist.engine.train import Trainer
from txl_dist.evaluation.loop import EvalResult, token_weighted
from txl_dist.model.accounting import rank_memory_bytes
from txl_dist.process.dist import World
from txl_dist.process.watchdog import Watchdog

CPU = torch.device("cpu")
ROWS, TGT_LEN = 2, 3


class FakeEngine:
    """What the loop uses of a DeepSpeed engine; the loss is the step count, so logs show it."""

    def __init__(self, events: list[str], watchdog: Watchdog):
        self.events, self.steps, self.nan_from, self.oom_at = events, 0, None, None
        self.watchdog, self.phases = watchdog, []  # the watchdog's phase at each step
        self.saved = []  # the states of the checkpoints saved
        # DeepSpeed's fp16 overflow handling: an update skipped is counted and does not step
        # the learning-rate schedule; the others do.
        self.skipped_steps, self.overflow_at, self.scheduler = 0, set(), None
        self.training, self.modes = False, []  # the mode at each forward
        # The model's cluster count, here the targets' sum; what each forward was given of it.
        self.module, self.sizes = SimpleNamespace(cluster_sizes=lambda t: [int(t.sum())]), []

    def __call__(self, input_ids, targets, mems, cluster_sizes=None):
        self.modes.append(self.training)
        self.sizes.append((cluster_sizes, int(targets.sum())))
        diverged = self.nan_from is not None and self.steps + 1 >= self.nan_from
        if self.steps + 1 == self.oom_at:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        loss = torch.full(targets.shape, math.nan if diverged else float(self.steps))
        loss.requires_grad_()
        return SimpleNamespace(loss=loss, mems=[input_ids.float().unsqueeze(-1)])

    def train(self):
        self.training = True

    def eval(self):
        self.training = False

    def backward(self, loss):
        loss.backward()

    def step(self):
        self.steps += 1
        if self.steps in self.overflow_at:
            self.skipped_steps += 1
        elif self.scheduler is not None:
            self.scheduler.optimizer.step()
            self.scheduler.step()
        self.events.append(f"step{self.steps}")
        self.phases.append(self.watchdog.current)

    def get_global_grad_norm(self):
        return 0.5


class ListStreams:
    """Batches from a list, with the attributes the loop reads of TokenStreams."""

    def __init__(self, steps: int):
        self.batches = [torch.full((ROWS, TGT_LEN), s) for s in range(steps)]
        self.new_epoch, self.epoch, self.vocab_size = False, 0, 10
        self.manifest = SimpleNamespace(vocab_sha256="ab" * 32, level="word", eos_token=None)
        self.position, self.closed, self.mixed = 0, False, False

    def __iter__(self):
        for batch in self.batches:
            self.position += 1
            yield batch, batch

    def state_dict(self):
        return {"position": self.position}

    def mix_tokens(self):
        """None (one corpus), or for a mix the tokens of the batches drawn, split 3:1."""
        tokens = self.position * ROWS * TGT_LEN
        return None if not self.mixed else {"web": tokens * 3 // 4, "books": tokens // 4}

    def close(self):
        self.closed = True


class SavesAsEvents(Checkpointer):
    """A Checkpointer whose write records the state and the watchdog's phase, nothing else."""

    def write(self, state: CheckpointState) -> str:
        engine = self.budget.engine
        engine.events.append(f"save@{state.step}")
        engine.phases.append(engine.watchdog.current)
        engine.saved.append(state)
        return f"checkpoints/global_step{state.step}"


class StopAt:
    """A stop request that all ranks agree on after step `step`."""

    def __init__(self, step: int | None, counter):
        self.step, self.counter = step, counter

    def agreed(self, device) -> bool:
        return self.step is not None and self.counter() >= self.step

    def reason(self) -> str:
        return "SIGTERM received"

    def settle(self) -> None:
        pass


def make_trainer(tmp_path, events, stop_at=None, start_step=0, evaluation=None, **train):
    settings = [f"data.path={tmp_path}", f"train.out_dir={tmp_path}", "model.n_token=10"]
    settings += ["model.cutoffs=[]", "model.tie_projs=[false]", "logging.log_interval=2"]
    # The fake engine has no states whose snapshot's memory to reserve: saves are only recorded.
    settings += [f"train.global_rows={ROWS}", "train.async_save=false"]
    settings += [f"train.{key}={value}" for key, value in train.items()]
    config = load_run_config(str(REPO_ROOT / "configs" / "tiny.json"), settings)
    watchdog = Watchdog.for_run(config.train, rank=0, world_size=1)
    engine = FakeEngine(events, watchdog)
    engine.steps = start_step

    def evaluate_split(split):
        engine.eval()  # as evaluation.split.SplitEvaluator leaves it
        events.append(f"eval:{split}@{engine.steps}")
        engine.phases.append(watchdog.current)
        return evaluation or EvalResult(loss=1.0, ppl=2.7, tokens=6, seconds=0.1)

    world, plan = World(rank=0, local_rank=0, world_size=1), config.plan(world_size=1)
    memory = MemoryBank(plan.accumulation)
    state = RunState(run_id="r", step=start_step, restarts=1 if start_step else 0)
    streams = ListStreams(config.train.max_steps)
    parts = [DeepSpeedPart(engine), RunPart(state), StreamPart(streams)]
    facts = checkpoint.record_facts(config, world, ROWS, streams, state.run_id)
    checkpoints = SavesAsEvents.for_run(parts, facts, config, world, start_step or None)
    metrics = Metrics(str(tmp_path), enabled=True, run={"run_id": "r", "restart": 0})
    spikes = SpikeGuard(config.spikes, SpikeRecord(SpikeDetector(config.spikes)), 1, metrics)
    nonfinite = NonFinite(CPU, config.train.max_nonfinite_steps, can_skip=True)
    stragglers = StragglerDetector.of(config.stragglers, world, CPU, engine, metrics.log)
    return Trainer(
        config=config,
        world=world,
        device=CPU,
        engine=engine,
        scheduler=SimpleNamespace(get_last_lr=lambda: [1e-3]),
        streams=streams,
        memory=memory,
        metrics=metrics,
        stop=StopAt(stop_at, lambda: engine.steps),
        watchdog=watchdog,
        evaluate_split=evaluate_split,
        checkpoints=checkpoints,
        state=state,
        seen=SeenTokens(),
        plan=plan,
        health=Health(spikes, nonfinite, stragglers),
    )


def logged_steps(tmp_path) -> list[int]:
    rows = (tmp_path / "metrics.jsonl").read_text().splitlines()
    return [json.loads(r)["step"] for r in rows if "split" not in json.loads(r)]


def test_evaluates_and_saves_at_their_intervals_and_at_the_end(tmp_path):
    events = []
    trainer = make_trainer(tmp_path, events, max_steps=6, eval_interval=4, save_interval=3)
    assert trainer.run() is None
    assert events == [
        "step1", "step2", "step3", "save@3", "step4", "eval:valid@4", "step5",
        "step6", "save@6", "eval:valid@6", "eval:test@6",
    ]  # fmt: skip
    assert logged_steps(tmp_path) == [2, 4, 6] and trainer.streams.closed


def test_every_step_trains_in_training_mode_also_after_an_evaluation(tmp_path):
    trainer = make_trainer(tmp_path, [], max_steps=5, eval_interval=2)
    trainer.run()
    assert trainer.engine.modes == [True] * 5


def test_the_end_does_not_save_or_evaluate_twice(tmp_path):
    events = []
    trainer = make_trainer(tmp_path, events, max_steps=4, eval_interval=4, save_interval=2)
    trainer.config.data.test_split = None
    trainer.run()
    assert events == ["step1", "step2", "save@2", "step3", "step4", "eval:valid@4", "save@4"]


@pytest.mark.parametrize("stop_at,saves", [(4, ["save@3", "save@4"]), (3, ["save@3"])])
def test_a_stop_saves_once_and_ends_the_loop_without_the_final_evaluation(tmp_path, stop_at, saves):
    events = []
    trainer = make_trainer(tmp_path, events, stop_at=stop_at, max_steps=10, save_interval=3)
    assert trainer.run() == "SIGTERM received"
    steps = [f"step{s}" for s in range(1, stop_at + 1)]
    assert [e for e in events if e.startswith("step")] == steps
    assert [e for e in events if not e.startswith("step")] == saves  # no evaluation
    assert events[-1] == f"save@{stop_at}" and trainer.step == stop_at and trainer.streams.closed


def test_a_stop_at_the_last_step_finishes_the_run(tmp_path):
    # Not an early stop: a batch script must not requeue a run that is done.
    events = []
    trainer = make_trainer(tmp_path, events, stop_at=4, max_steps=4, save_interval=3)
    trainer.config.data.test_split = None
    assert trainer.run() is None
    assert events[-3:] == ["step4", "save@4", "eval:valid@4"]


@pytest.mark.parametrize("valid_split", [None, "valid"])
def test_a_resumed_run_continues_from_its_step(tmp_path, valid_split):
    events = []
    trainer = make_trainer(tmp_path, events, start_step=4, max_steps=6, eval_interval=0)
    trainer.config.data.valid_split = valid_split
    trainer.config.data.test_split = None
    trainer.run()
    final_eval = ["eval:valid@6"] if valid_split else []
    assert events == ["step5", "step6", "save@6", *final_eval]
    assert logged_steps(tmp_path) == [6]
    # The checkpoint records the trainer's place and the stream's (2 batches read since start).
    (saved,) = trainer.engine.saved
    run, stream = saved.parts["run"], saved.parts["stream"]
    assert (saved.step, saved.run_id, run["restarts"], stream) == (6, "r", 1, {"position": 2})
    assert (saved.world_size, saved.rows_per_rank, saved.vocab_sha256) == (1, ROWS, "ab" * 32)


def test_a_run_resumed_at_its_last_step_saves_nothing_again(tmp_path):
    events = []
    trainer = make_trainer(tmp_path, events, start_step=4, max_steps=4, eval_interval=0)
    trainer.config.data.valid_split = trainer.config.data.test_split = None
    assert trainer.run() is None
    assert events == []


def test_non_finite_losses_end_the_run_at_the_next_log_line_and_before_any_save(tmp_path):
    # Counted on the device, read at log lines (every 2 steps) and saves: steps 2-4 diverge, the
    # save at step 3 sees 2 in a row and goes ahead, the log line at step 4 sees the third.
    events = []
    trainer = make_trainer(
        tmp_path, events, max_steps=10, save_interval=3, max_nonfinite_steps=3, eval_interval=0
    )
    trainer.engine.nan_from = 2
    with pytest.raises(NonFiniteLossError, match="3 consecutive steps had a non-finite loss"):
        trainer.run()
    assert events == ["step1", "step2", "step3", "save@3", "step4"]
    assert logged_steps(tmp_path) == [2]  # the line of step 4 is not written


def test_steps_evaluations_and_saves_run_as_phases_with_their_timeouts(tmp_path):
    events = []
    trainer = make_trainer(
        tmp_path,
        events,
        max_steps=3,
        eval_interval=2,
        save_interval=2,
        hang_timeout_s=60,
        checkpoint_timeout_s=600,
    )
    assert trainer.run() is None
    phases = [(p.name, p.step, p.timeout_s, p.setting) for p in trainer.engine.phases]
    assert phases == [
        ("step", 1, 600, "train.checkpoint_timeout_s"),  # the first step after a start is slow
        ("step", 2, 60, "train.hang_timeout_s"),
        ("evaluation", 2, 60, "train.hang_timeout_s"),
        ("checkpoint save", 2, 600, "train.checkpoint_timeout_s"),
        ("step", 3, 60, "train.hang_timeout_s"),
        ("checkpoint save", 3, 600, "train.checkpoint_timeout_s"),
        ("evaluation", 3, 60, "train.hang_timeout_s"),
        ("evaluation", 3, 60, "train.hang_timeout_s"),
    ]
    assert trainer.watchdog.current is None  # nothing left armed after the run


def test_out_of_memory_in_a_step_ends_the_run_naming_txl_inspects_estimate(tmp_path):
    trainer = make_trainer(tmp_path, [], max_steps=6)
    trainer.engine.oom_at = 3
    estimate = rank_memory_bytes(trainer.config.model, 2, 1, ROWS) / 2**30  # tiny: ZeRO-2 bf16
    with pytest.raises(OutOfDeviceMemoryError, match=f"estimates {estimate:.2f} GiB a rank"):
        trainer.run()


def test_updates_deepspeed_skipped_for_overflow_are_logged_as_skipped_steps(tmp_path):
    trainer = make_trainer(tmp_path, [], max_steps=4)
    trainer.engine.skipped_steps = 3  # fp16 overflows: finite losses, updates skipped
    trainer.run()
    rows = [json.loads(r) for r in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["skipped_steps"] for r in rows if "split" not in r] == [3, 3]


def test_the_learning_rate_follows_the_step_count_through_skipped_updates(tmp_path):
    trainer = make_trainer(tmp_path, [], max_steps=6)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = lr_multiplier(trainer.config.optim, trainer.config.train.max_steps)
    trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    trainer.engine.scheduler, trainer.engine.overflow_at = trainer.scheduler, {1, 3}
    trainer.run()
    rows = [json.loads(r) for r in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert trainer.scheduler.last_epoch == 6
    assert [r["lr"] for r in rows if "split" not in r] == [schedule(2), schedule(4), schedule(6)]


def test_a_mix_logs_its_tokens_per_corpus_and_evaluates_each_corpus_and_their_mean(
    tmp_path, caplog
):
    web, books = EvalResult(2.0, 7.39, 300, 1.0), EvalResult(4.0, 54.6, 100, 1.0)
    trainer = make_trainer(
        tmp_path,
        [],
        max_steps=4,
        eval_interval=4,
        evaluation=token_weighted(dict(web=web, books=books)),
    )
    trainer.streams.mixed = True
    trainer.config.data.test_split = None
    with caplog.at_level("INFO"):
        trainer.run()
    rows = [json.loads(r) for r in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "split" not in r]
    assert [r["mix_tokens"] for r in train] == [{"web": 9, "books": 3}, {"web": 18, "books": 6}]
    assert [r["mix_shares"] for r in train] == [{"web": 0.75, "books": 0.25}] * 2
    evals = [(r.get("corpus"), r["loss"], r["tokens"]) for r in rows if "split" in r]
    assert evals == [("web", 2.0, 300), ("books", 4.0, 100), (None, 2.5, 400)]  # mean by tokens
    assert math.isclose([r for r in rows if "split" in r][-1]["ppl"], math.exp(2.5))
    lines = caplog.messages
    assert any("| mix, all ranks: web 18 (75.0%) books 6 (25.0%)" in line for line in lines)
    assert any(line.startswith("eval valid books step 4 | loss 4.0000") for line in lines)
    assert trainer.metrics.evaluations["valid"]["loss"] == 2.5  # the summary shows the mean


def test_a_background_save_is_waited_for_only_before_an_optimizer_update(tmp_path):
    # 2 rows on 1 rank, 1 row per micro step: DeepSpeed updates at every second engine.step;
    # the first micro step's forward and backward may run beside the serialization.
    events = []
    trainer = make_trainer(tmp_path, events, max_steps=3, max_micro_rows=1)
    micro_steps_before = []
    trainer.checkpoints.before_update = lambda: micro_steps_before.append(trainer.engine.steps)
    trainer.run()
    assert trainer.plan.accumulation == 2
    assert micro_steps_before == [1, 3, 5]


def test_each_slot_is_given_its_targets_cluster_sizes_counted_on_the_host(tmp_path):
    """The softmax's cluster sizes come with each micro batch, from that slot's targets, so
    the model's step reads nothing back from the device."""
    trainer = make_trainer(tmp_path, [], max_steps=3, max_micro_rows=1)  # 2 slots a step
    trainer.run()
    assert len(trainer.engine.sizes) == 6
    assert all(given == [total] for given, total in trainer.engine.sizes)


def test_the_log_shows_the_tokens_this_rank_has_seen_since_the_run_began(tmp_path):
    trainer = make_trainer(tmp_path, [], max_steps=4)
    trainer.seen.tokens = 1000  # what a resumed checkpoint had seen
    trainer.run()
    rows = [json.loads(r) for r in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    per_step = ROWS * TGT_LEN
    assert [r["tokens_seen"] for r in rows if "split" not in r] == [
        1000 + 2 * per_step,
        1000 + 4 * per_step,
    ]
