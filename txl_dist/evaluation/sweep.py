"""txl-eval's length sweeps: exported models scored at many memory or clamp lengths.

The split is read once: its batches are kept (16 bytes per token of this rank's rows) and
replayed for every length and model. Each length is an ordinary evaluation (loop.py's
`evaluate`, distributed when the process group is up), so a sweep row is what a plain
`txl-eval --mem-len L` prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from data_pipeline import IGNORE_INDEX
from txl_dist.evaluation.context import (
    SEGMENT_ALONE_MARK,
    SEGMENT_ALONE_NOTE,
    Recl,
    SweepRow,
    attention_length,
    check_lengths,
    effective_context,
    recl,
)
from txl_dist.evaluation.loop import evaluate
from txl_dist.evaluation.scores import score
from txl_dist.model import TransformerXL


@dataclass
class SweepResult:
    """The rows and what they say about context use."""

    rows: list[SweepRow]
    """Every model at every length, by model then context."""
    threshold: float
    """The effective-context and RECL threshold used."""
    effective: dict[str, int]
    """Effective context of each model (txl_dist.evaluation.context.effective_context)."""
    recl: dict[str, list[Recl]]
    """RECL of each model at each r, when several models were swept as a group."""


class ReplayBatches:
    """A batch source read once: the first pass keeps its batches, later passes replay them."""

    def __init__(self, source):
        self.source = source
        self.kept: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    @property
    def steps_per_epoch(self) -> int:
        return self.source.steps_per_epoch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self.kept is not None:
            yield from self.kept
            return
        kept = []
        for batch in self.source:
            kept.append(batch)
            yield batch
        self.kept = kept


class Scorer:
    """The model as evaluate() calls it: ticks the sweep's bar, keeps per-token losses if asked."""

    def __init__(self, model: TransformerXL, bar: tqdm, keep_losses: bool):
        self.model, self.bar, self.keep_losses = model, bar, keep_losses
        self.losses: list[torch.Tensor] = []

    def __call__(self, input_ids, targets, mems):
        out = self.model(input_ids, targets, mems)
        if self.keep_losses:
            self.losses.append(out.loss[targets != IGNORE_INDEX].float().cpu())
        self.bar.update()
        return out

    def token_losses(self) -> np.ndarray | None:
        """Per-token losses of the evaluation, all ranks' concatenated on rank 0 (else None)."""
        local = torch.cat(self.losses).numpy() if self.losses else np.zeros(0, np.float32)
        self.losses = []
        if not dist.is_initialized():
            return local
        parts = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object(local, parts, dst=0)
        return np.concatenate(parts) if parts is not None else None


def run_sweep(
    load: Callable[[str], TransformerXL],
    models: list[str],
    batches: Iterable,
    device: torch.device,
    swept: str,
    lengths: list[int],
    threshold: float,
    rs: list[float],
    progress: bool,
    level: str,
) -> SweepResult:
    """Score every model at every length; `load` gives a model with its evaluation lengths.
    Rows give perplexity or, for char-level data (``level``), bits per character."""
    batches = ReplayBatches(batches)
    group = len(models) > 1  # RECL compares a group: it needs every token's loss
    steps = batches.steps_per_epoch * len(models) * len(lengths)
    # A live bar on a terminal only (disable=None): in a log file its carriage returns pile up.
    bar = tqdm(total=steps, desc="sweep", disable=None if progress else True, mininterval=0.5)
    rows: list[SweepRow] = []
    token_losses: list[np.ndarray | None] = []
    with bar:
        for name in models:
            model = load(name)
            settings = [_settings(model, name, swept, length) for length in lengths]
            settings.sort(key=lambda s: s.context)
            _check_group(rows, settings, model)
            scorer = Scorer(model, bar, keep_losses=group)
            per_length = []
            for s in settings:
                bar.set_postfix_str(f"{name} {swept}={getattr(s, swept)}")
                model.set_lengths(s.tgt_len, s.mem_len, s.clamp_len, s.same_length)
                result = evaluate(scorer, batches, device, progress=False)
                scores = score(result.loss, level)
                rows.append(
                    dataclasses.replace(s, loss=result.loss, **scores, tokens=result.tokens)
                )
                per_length.append(scorer.token_losses() if group else None)
            kept = group and per_length[0] is not None  # rank 0 of a group
            token_losses.append(np.stack(per_length) if kept else None)
            del model, scorer
    return _summarize(rows, models, token_losses, threshold, rs)


def _settings(model: TransformerXL, name: str, swept: str, length: int) -> SweepRow:
    """The row (without results) of `model` at `length` of the swept quantity."""
    cfg = model.config
    mem_len = length if swept == "mem_len" else cfg.mem_len
    clamp_len = length if swept == "clamp_len" else cfg.clamp_len
    # With same_length, mem_len 0 would attend to no keys: score the segment alone instead,
    # the no-memory baseline a memory sweep starts from, at context 0 below every memory.
    alone = swept == "mem_len" and mem_len == 0 and cfg.same_length
    same_length = cfg.same_length and not alone
    check_lengths(mem_len, same_length)
    attn_len = attention_length(cfg.tgt_len, mem_len, same_length)
    context = 0 if alone else attn_len if swept == "mem_len" or clamp_len < 0 else clamp_len
    return SweepRow(
        name, swept, context, cfg.tgt_len, mem_len, clamp_len, same_length, attn_len,
        loss=float("nan"), ppl=None, bpc=None, tokens=0, segment_alone=alone,
    )  # fmt: skip


def _check_group(rows: list[SweepRow], settings: list[SweepRow], model) -> None:
    """A group's models must score the same tokens at the same contexts."""
    if not rows:
        return
    first, name = rows[0], settings[0].model
    if model.config.tgt_len != first.tgt_len:
        raise ValueError(
            f"{name} evaluates with tgt_len {model.config.tgt_len}, {first.model} with "
            f"{first.tgt_len}: pass --tgt-len so that every model scores the same segments"
        )
    theirs = [r.context for r in rows if r.model == first.model]
    if [s.context for s in settings] != theirs:
        raise ValueError(
            f"{name} gives contexts {[s.context for s in settings]}, {first.model} {theirs}: "
            "pass --same-length (and --mem-len / --clamp-len) so that the models compare"
        )


def _summarize(rows, models, token_losses, threshold, rs) -> SweepResult:
    effective = {}
    for name in models:
        mine = [r for r in rows if r.model == name]
        effective[name] = effective_context(
            [r.context for r in mine], [r.loss for r in mine], threshold
        )
    group: dict[str, list[Recl]] = {}
    if len(models) > 1 and token_losses[0] is not None:  # rank 0 holds the gathered losses
        contexts = [r.context for r in rows if r.model == models[0]]
        stacked = np.stack(token_losses)  # [models, contexts, tokens]
        per_r = [recl(stacked, contexts, r, threshold) for r in rs]
        group = {name: [by_model[i] for by_model in per_r] for i, name in enumerate(models)}
    return SweepResult(rows, threshold, effective, group)


# ---- output: table, JSON, CSV ----


def table(result: SweepResult) -> str:
    """The rows, each model's effective context and the group's RECL, for a terminal."""
    width = max(len("model"), *(len(r.model) for r in result.rows))
    name = result.rows[0].score[0]
    digits = 4 if name == "bpc" else 3
    lines = [f"{'model':<{width}}  mem_len  clamp_len  attn_len      loss  {name:>10}    tokens"]
    for r in result.rows:
        mem_len = f"{r.mem_len}{SEGMENT_ALONE_MARK if r.segment_alone else ''}"
        lines.append(
            f"{r.model:<{width}}  {mem_len:>7}  {r.clamp_len:>9}  {r.attn_len:>8}  "
            f"{r.loss:>8.4f}  {r.score[1]:>10.{digits}f}  {r.tokens:>8}"
        )
    if any(r.segment_alone for r in result.rows):
        lines.append(f"{SEGMENT_ALONE_MARK} {SEGMENT_ALONE_NOTE}")
    swept = result.rows[0].swept
    axis = "attention length" if swept == "mem_len" else "clamp length"
    lines.append(
        f"\neffective context: the shortest {axis} whose loss is within "
        f"{result.threshold:.0%} of the longest one's"
    )
    lines += [f"  {name:<{width}}  {length}" for name, length in result.effective.items()]
    if result.recl:
        rs = [x.r for x in next(iter(result.recl.values()))]
        lines.append(
            f"\nRECL (Dai et al. 2019, appendix C; relative gain threshold {result.threshold:.0%})"
        )
        lines.append(f"  {'model':<{width}}" + "".join(f"  {'r=' + str(r):>8}" for r in rs))
        for name, values in result.recl.items():
            cells = "".join(f"  {('>=' if v.capped else '') + str(v.length):>8}" for v in values)
            lines.append(f"  {name:<{width}}{cells}")
    return "\n".join(lines)


def to_json(result: SweepResult) -> dict:
    return dict(
        rows=[dataclasses.asdict(r) for r in result.rows],
        threshold=result.threshold,
        effective_context=result.effective,
        recl={name: [dataclasses.asdict(v) for v in rs] for name, rs in result.recl.items()},
    )
