"""The training run's evaluation of a split: the engine's model, the config's evaluation lengths,
the rows spread over the ranks; a data.mix scored corpus by corpus."""

from __future__ import annotations

from collections.abc import Callable

import torch

from data_pipeline import TokenStreams
from txl_dist.config.plan import RunPlan
from txl_dist.config.sections import RunConfig
from txl_dist.evaluation.loop import EvalResult, evaluate, token_weighted
from txl_dist.process.dist import World
from txl_dist.process.watchdog import Watchdog

OpenStreams = Callable[..., TokenStreams]
"""engine.data.open_streams: (config, world, split, tail, rows, tgt_len, root) -> streams."""


class SplitEvaluator:
    """Scores a whole split with the config's evaluation lengths, distributed over the ranks;
    each batch is progress for the watchdog. `open_streams` is the engine's (engine.data): a
    split's streams as training reads its data."""

    def __init__(
        self,
        engine,
        config: RunConfig,
        world: World,
        plan: RunPlan,
        device: torch.device,
        watchdog: Watchdog,
        open_streams: OpenStreams,
    ):
        self.engine, self.config, self.world, self.device = engine, config, world, device
        self.rows, self.watchdog = plan.eval_rows_per_rank, watchdog
        self.open_streams = open_streams

    def __call__(self, split: str) -> EvalResult:
        """The split's result; for data.mix, each corpus's split and their token-weighted mean."""
        mix = self.config.data.mix
        if mix is None:
            return self.score(split, None)
        return token_weighted({c.name: self.score(split, c.path) for c in mix})

    def score(self, split: str, root: str | None) -> EvalResult:
        """Evaluate `split` of the dataset at `root` (data.path if None)."""
        eval_cfg = self.config.model.for_eval()
        streams = self.open_streams(
            self.config, self.world, split, tail=True, rows=self.rows, tgt_len=eval_cfg.tgt_len,
            root=root,
        )  # fmt: skip
        lengths = (eval_cfg.tgt_len, eval_cfg.mem_len, eval_cfg.clamp_len, eval_cfg.same_length)
        self.engine.eval()
        try:
            # Eager even under train.compile: evaluation's many memory lengths (growing by
            # eval_tgt_len up to eval_mem_len) would each compile a graph for one pass.
            with self.engine.module.lengths(*lengths), torch.compiler.set_stance("force_eager"):
                return evaluate(
                    self.engine,
                    streams,
                    self.device,
                    progress=self.world.is_main,
                    on_batch=self.watchdog.progress,
                )
        finally:
            streams.close()
