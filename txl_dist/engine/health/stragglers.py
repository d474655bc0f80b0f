"""Straggler detection: each rank times its step's sections; every `stragglers.interval` steps the
ranks exchange those times (one all_gather of four floats) and name a rank that stays slower than
the fastest one.

Sections: `data` (waiting for the next batch), `forward_backward` (the slots' forward and backward
passes), `optimizer` (DeepSpeed's step, ZeRO's parameter all-gather in it) and `communication`
(DeepSpeed's gradient reduction, `engine.allreduce_gradients`, taken out of forward_backward). In
a synchronous step the fast ranks wait for a slow one at the next collective, the gradient
reduction: the wait lands in their communication, so the slow rank's own section stands out and
communication is recorded but never scored (a rank that waits least there is the slow one).
Times are the host's clock: on a GPU a section whose kernels the host does not wait for moves to
the next point where it does (the reduction), and stays unscored.

A rank's time in a section is the lower quartile of the interval's per-step times (QUANTILE):
other work on the machine only ever adds time, so a rank's quicker steps show its own speed and
the odd slow step does not count; a rank slowed at most steps (a throttled device, a slower
link) moves its quartile as much as its median. Measured on a shared 2-core machine, equal
ranks' quartiles differed half as much as their medians (docs/training.md, Slow ranks).
Scores per rank and section:
- relative score: the fastest rank's time / this rank's (1: the fastest);
- individual score: this rank's best interval / this one (1: as fast as it has ever been).
A section is slow in an interval when its relative score is under `stragglers.threshold` and it
costs at least `stragglers.min_share` of the median step more than on the fastest rank (twice a
0.1 ms data wait slows nobody); with `stragglers.individual_threshold`, its individual score must
be under that too. A rank slow in one section for `stragglers.consecutive` intervals in a row is
named once (one line, a metrics.jsonl record); under `policy: stop` the run then checkpoints and
ends with STRAGGLER_EXIT_CODE, and the stop file names the rank's host for the batch script.
Every rank scores the same gathered times, so every rank takes the same decision.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import socket
import time
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist

from txl_dist.config.stragglers import StragglerConfig
from txl_dist.engine.health import slow_injection
from txl_dist.engine.health.slow_injection import SlowInjection

STRAGGLER_EXIT_CODE = 76  # a rank was named a straggler under stragglers.policy=stop
SECTIONS = ("data", "forward_backward", "optimizer", "communication")
SCORED = SECTIONS[:3]  # communication is the others' wait, not a rank's own work
QUANTILE = 0.25  # of a rank's per-step times in an interval: its lower quartile


def host_name() -> str:
    """The node's name as SLURM knows it (what `--exclude` takes), else the host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


class SectionClock:
    """This rank's seconds per section and step, since the last exchange."""

    def __init__(
        self, injection: SlowInjection | None = None, now: Callable[[], float] = time.perf_counter
    ):
        self.injection, self.now = injection, now
        self.step = dict.fromkeys(SECTIONS, 0.0)
        self.steps: list[list[float]] = []  # one row per step of the interval
        self._open: tuple[str, float, float] | None = None  # section, start, communication then
        self._injected = False

    @contextlib.contextmanager
    def timed(self, section: str) -> Iterator[None]:
        self._open = (section, self.now(), self.step["communication"])
        self._injected = False
        try:
            yield
        finally:
            self._inject()
            self.step[section] += self._own_seconds()
            self._open = None

    def communicating(self, fn: Callable) -> Callable:
        """`fn` (a collective inside a section) timed as communication, not as the section."""

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            self._inject()  # a slow device is late before it communicates, not after
            start = self.now()
            try:
                return fn(*args, **kwargs)
            finally:
                self.step["communication"] += self.now() - start

        return timed

    def step_done(self) -> None:
        self.steps.append([self.step[s] for s in SECTIONS])
        self.step = dict.fromkeys(SECTIONS, 0.0)

    def take_quartiles(self) -> list[float]:
        """The interval's lower quartile of seconds a step per section; starts the next one."""
        rows = torch.tensor(self.steps or [[0.0] * len(SECTIONS)], dtype=torch.float64)
        self.steps = []
        return rows.quantile(QUANTILE, dim=0).tolist()

    def _own_seconds(self) -> float:
        """The open section's time so far, communication inside it excluded."""
        if self._open is None:
            return 0.0
        _, start, communication = self._open
        return self.now() - start - (self.step["communication"] - communication)

    def _inject(self) -> None:
        if self.injection is not None and self._open is not None and not self._injected:
            self.injection.delay(self._open[0], self._own_seconds())
            self._injected = True


@dataclasses.dataclass
class Scores:
    """One interval's scores, ranks by scored sections."""

    relative: torch.Tensor
    individual: torch.Tensor
    slow: torch.Tensor
    """Slow against the fastest rank by the thresholds (bool)."""


def score(seconds: torch.Tensor, best: torch.Tensor | None, config: StragglerConfig) -> Scores:
    """Scores of `seconds` (ranks x SECTIONS, seconds a step at QUANTILE), `best` each rank's
    fastest earlier interval (ranks x SCORED; None: this is the first)."""
    scored = seconds[:, : len(SCORED)]
    best = scored if best is None else best
    fastest = scored.min(dim=0).values
    relative = _ratio(fastest.expand_as(scored), scored)
    individual = _ratio(best, scored)
    step = seconds.sum(dim=1).quantile(0.5)
    slow = (relative < config.threshold) & (scored - fastest >= config.min_share * step)
    if config.individual_threshold is not None:
        slow &= individual < config.individual_threshold
    return Scores(relative, individual, slow)


def _ratio(faster: torch.Tensor, seconds: torch.Tensor) -> torch.Tensor:
    """faster / seconds, 1 where a section took no time at all."""
    return torch.where(seconds > 0, faster / seconds.clamp_min(1e-12), torch.ones_like(seconds))


@dataclasses.dataclass
class Straggler:
    """A rank named slow in one section."""

    step: int
    rank: int
    host: str
    section: str
    seconds: float
    """Its seconds a step in the section over the last interval (lower quartile)."""
    median_s: float
    """The median over ranks of the same."""
    relative: float
    individual: float
    intervals: int

    def line(self) -> str:
        return (
            f"straggler: rank {self.rank} (host {self.host}) {self.section} "
            f"{self.seconds * 1000:.1f} ms a step against the ranks' median "
            f"{self.median_s * 1000:.1f} ms ({self.seconds / self.median_s:.2f}x; relative score "
            f"{self.relative:.2f}) for {self.intervals} intervals to step {self.step}"
        )

    def record(self) -> dict:
        return dict(event="straggler", **dataclasses.asdict(self))


class StragglerDetector:
    """The hooks the training loop calls (`timed`, `step_done`) and the exchange behind them."""

    def __init__(self, config: StragglerConfig, world_size: int, device: torch.device, log):
        self.config, self.device, self.log = config, device, log
        self.active = config.enabled and world_size > 1  # no peer: nothing to compare
        self.clock: SectionClock | None = None
        self.streaks = torch.zeros(world_size, len(SCORED), dtype=torch.long)
        self.best: torch.Tensor | None = None
        self.hosts: list[str] | None = None
        self.stopped: list[Straggler] = []
        """The stragglers a `stop` policy stopped the run for."""

    @classmethod
    def of(cls, config: StragglerConfig, world, device: torch.device, engine, log):
        """The detector of this rank, its clock on `engine`'s gradient reduction; `log(record,
        line)` writes the metrics."""
        detector = cls(config, world.world_size, device, log)
        injection = slow_injection.from_env(world.rank)
        if detector.active or injection is not None:
            detector.clock = SectionClock(injection)
            engine.allreduce_gradients = detector.clock.communicating(engine.allreduce_gradients)
        return detector

    def timed(self, section: str) -> contextlib.AbstractContextManager:
        return self.clock.timed(section) if self.clock else contextlib.nullcontext()

    def step_done(self, step: int) -> str | None:
        """End of a step; every `interval` steps the exchange (a collective). Returns why the run
        stops when a rank is named under the stop policy."""
        if self.clock is None:
            return None
        self.clock.step_done()
        if not self.active or step % self.config.interval:
            return None
        return self.act(self.judge(self._exchange(), step))

    def act(self, named: list[Straggler]) -> str | None:
        """Log the named ranks; under the stop policy, why the run stops (None: it goes on)."""
        for straggler in named:
            self.log(straggler.record(), straggler.line())
        if named and self.config.policy == "stop":
            self.stopped = named
            return "straggler " + ", ".join(
                f"rank {s.rank} (host {s.host}) in {s.section}" for s in named
            )
        return None

    def judge(self, seconds: torch.Tensor, step: int) -> list[Straggler]:
        """The ranks named at this interval, from every rank's `seconds` (ranks x SECTIONS)."""
        scores = score(seconds, self.best, self.config)
        scored = seconds[:, : len(SCORED)]
        self.best = scored if self.best is None else torch.minimum(self.best, scored)
        self.streaks = (self.streaks + 1) * scores.slow
        medians = scored.quantile(0.5, dim=0)
        hosts = self.hosts or ["?"] * len(seconds)
        named = []
        for rank, s in (self.streaks == self.config.consecutive).nonzero().tolist():
            named.append(
                Straggler(
                    step=step,
                    rank=rank,
                    host=hosts[rank],
                    section=SCORED[s],
                    seconds=scored[rank, s].item(),
                    median_s=medians[s].item(),
                    relative=scores.relative[rank, s].item(),
                    individual=scores.individual[rank, s].item(),
                    intervals=self.config.consecutive,
                )
            )
        return named

    def _exchange(self) -> torch.Tensor:
        """Every rank's seconds a step per section over the interval (ranks x SECTIONS)."""
        mine = torch.tensor(self.clock.take_quartiles(), dtype=torch.float64, device=self.device)
        gathered = [torch.empty_like(mine) for _ in range(len(self.streaks))]
        dist.all_gather(gathered, mine)
        if self.hosts is None:  # once, at the first exchange
            self.hosts = [""] * len(self.streaks)
            dist.all_gather_object(self.hosts, host_name())
        return torch.stack(gathered).cpu()
