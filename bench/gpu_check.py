"""The GPU check: correctness on the device, the engine through its real entry point, speed.

    python bench/gpu_check.py [--device cuda] [--quick] [--out DIR] [--data DIR]
                              [--reference DIR]

Prints a table and writes the same rows to OUT/gpu_check.json (OUT: --out, else $OUT, else
runs/gpu_check). Each row is a check with its value, its limit and ok (true / false, or null for
a check skipped, with the reason); the exit status is 1 when any row failed.

- correctness: the same weights and batches (3 segments with memory, dropout off) on the device
  in float32 and bf16 against float64 on the CPU: NLL and the gradients' cosine similarity; on
  CUDA also a bf16 step inside SDPA's memory-efficient kernel only, so a silent fallback to the
  math path is an error.
- engine: `python launch/pretrain.py` (world size 1) on the WikiText-103 prefix in --data (raw
  wiki.{train,valid}.tokens, prepared here): ZeRO-2 bf16 with a profiler trace of two steps,
  then a resume from its middle checkpoint that must repeat its losses, then ZeRO-3 bf16 (the
  same first loss: the same initial weights) and ZeRO-2 fp16 (CUDA only); loss falls,
  evaluation runs, the fp16 loss scale moves and its skipped steps are counted.
- speed: forward + backward of each config at its shipped micro batch and twice it: tokens/s,
  MFU, peak memory against txl-inspect's estimate, train.compile's layers, and the reference
  MemTransformerLM (kimiyoung/transformer-xl, --reference: a checkout kept outside the repo) on
  the same shapes in fp32 and bf16 autocast, as a ratio; and one attention layer alone at
  `large`'s shapes against the reference's.

--device cpu --quick runs every part that a CPU can on the tiny config's shapes, for CI.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import gzip
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script: the bench and txl_dist packages beside it

from bench.levers import LEVERS, plain_step  # noqa: E402
from bench.step_profile import corpus_tokens, profile_step, uniform_tokens  # noqa: E402
from bench.train_step import reference_step  # noqa: E402
from bench.vs_reference import reference_tree  # noqa: E402
from data_pipeline.cli import main as prepare_main  # noqa: E402
from txl_dist.config.sections import run_config_from_dict  # noqa: E402
from txl_dist.engine.build import compile_layers  # noqa: E402
from txl_dist.engine.throughput import device_peak_tflops  # noqa: E402
from txl_dist.model import TransformerXL, TXLConfig  # noqa: E402
from txl_dist.model.accounting import (  # noqa: E402
    activation_bytes_per_row,
    rank_memory_bytes,
    train_flops_per_token,
)
from txl_dist.model.attention import (  # noqa: E402
    RelMultiHeadAttention,
    attention_bias,
    relative_distances,
    sinusoid_encoding,
)

VALID_BYTES = 100_000  # of the valid split: an evaluation of seconds
NLL_ABS_FP32 = 1e-4
NLL_REL_BF16 = 1e-2
COSINE_FP32 = 0.999
COSINE_BF16 = 0.99


@dataclasses.dataclass
class Row:
    """One check: what was measured, against what, and whether it passed."""

    section: str
    """correctness, engine or speed."""
    name: str
    """What was checked, with the config and precision."""
    value: float | None
    """The measured number (None where the check did not run)."""
    limit: str
    """What the value must satisfy, or the unit of a measurement."""
    ok: bool | None
    """Passed, failed, or None: skipped or a plain measurement."""
    detail: str = ""
    """Why it was skipped, or more figures."""
    targets: str | None = None
    """A speed row's targets: "corpus" (real text's ids) or "uniform" (drawn uniformly)."""
    busy: float | None = None
    """A speed row's device-busy fraction of one profiled step's wall time."""
    breakdown: dict[str, float] | None = None
    """A speed row's busy time of that step by category (step_profile.CATEGORIES), and idle, ms."""


@dataclasses.dataclass
class Plan:
    """Which configs and sizes the check runs: the full GPU run or the quick CPU one."""

    correctness: list[tuple[str, dict]]
    """(config, model overrides) compared on the device against float64 on the CPU."""
    correctness_rows: int
    """Batch rows of the correctness segments."""
    engine_config: str
    """Config the engine runs train."""
    engine_steps: int
    """Optimizer steps of each engine run; the resume starts from the middle."""
    engine_settings: list[str]
    """--set overrides of every engine run."""
    fp16: bool
    """Whether the ZeRO-2 fp16 run happens (fp16 needs a GPU)."""
    speed: list[tuple[str, dict, list[int]]]
    """(config, model overrides, micro batches) timed forward + backward."""
    speed_steps: int
    """Timed steps of each speed row (after warm-up)."""
    compile: bool
    """Whether train.compile's layers are timed too."""


FULL = Plan(
    correctness=[("tiny", {"n_token": 32_000}), ("wt103_base", {})],
    correctness_rows=2,
    engine_config="wt103_base",
    engine_steps=100,
    engine_settings=[  # the prefix's own vocabulary: 32,487 words, one adaptive cutoff
        "optim.warmup_steps=20",
        "train.eval_rows=60",
        "model.n_token=auto",
        "model.cutoffs=[20000]",
        "model.tie_projs=[false,true]",
    ],
    fp16=True,
    speed=[("wt103_base", {}, [30, 60]), ("large", {}, [16, 32])],
    speed_steps=10,
    compile=True,
)
QUICK = Plan(
    correctness=[
        ("tiny", {"n_token": 2_000, "cutoffs": [500, 1_000], "tgt_len": 16, "mem_len": 16})
    ],
    correctness_rows=2,
    engine_config="tiny",
    engine_steps=6,
    engine_settings=[
        "train.global_rows=2",
        "optim.warmup_steps=2",
        "optim.lr=0.001",
        "model.tgt_len=16",
        "model.mem_len=16",
        "model.eval_tgt_len=64",  # 4x fewer evaluation segments than 16: the same check
        "model.eval_mem_len=16",
        "train.eval_rows=2",
    ],
    fp16=False,
    speed=[
        ("tiny", {"n_token": 2_000, "cutoffs": [500, 1_000], "tgt_len": 32, "mem_len": 32}, [2])
    ],
    speed_steps=2,
    compile=False,
)


def model_config(name: str, overrides: dict) -> TXLConfig:
    """A shipped config's model with `overrides`; an `auto` vocabulary becomes 32,000."""
    values = json.loads((REPO / "configs" / f"{name}.json").read_text())["model"]
    values = {**values, **({"n_token": 32_000} if values["n_token"] == "auto" else {})}
    return TXLConfig.from_dict({**values, **overrides})


# ---- correctness ----


def segments(config: TXLConfig, rows: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """3 segments of (input ids, targets), most targets in the head cluster as in real text."""
    g = torch.Generator().manual_seed(seed)
    head = config.cutoffs[0] if config.cutoffs else config.n_token
    ids = torch.randint(0, head, (rows, 3 * config.tgt_len + 1), generator=g)
    rare = torch.rand(ids.shape, generator=g) < 0.1
    ids = torch.where(rare, torch.randint(0, config.n_token, ids.shape, generator=g), ids)
    q = config.tgt_len
    return [(ids[:, i * q : (i + 1) * q], ids[:, i * q + 1 : (i + 1) * q + 1]) for i in range(3)]


def nll_and_grads(
    model: TransformerXL, batches, device: torch.device
) -> tuple[list[float], torch.Tensor]:
    """Mean NLL of each segment (memory carried over) and the flat gradient of their sum."""
    model.zero_grad(set_to_none=True)
    mems, losses = None, []
    for input_ids, targets in batches:
        out = model(input_ids.to(device), targets.to(device), mems)
        loss = out.loss.float().mean()
        loss.backward()
        mems, losses = out.mems, [*losses, loss.item()]
    grads = torch.cat([p.grad.double().flatten().cpu() for p in model.parameters()])
    return losses, grads


def correctness_rows(plan: Plan, device: torch.device) -> list[Row]:
    rows = []
    for name, overrides in plan.correctness:
        config = dataclasses.replace(model_config(name, overrides), dropout=0.0, dropatt=0.0)
        torch.manual_seed(0)
        reference = TransformerXL(config).double().train()
        batches = segments(config, plan.correctness_rows, seed=1)
        ref_losses, ref_grads = nll_and_grads(reference, batches, torch.device("cpu"))
        for dtype, label in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            model = copy.deepcopy(reference).to(device=device, dtype=dtype)
            losses, grads = nll_and_grads(model, batches, device)
            rows += compared(
                f"{name} {label} on {device.type}",
                ref_losses,
                losses,
                F.cosine_similarity(ref_grads, grads, dim=0).item(),
                dtype,
            )
            del model
        rows.append(efficient_attention_step(config, batches, device, name))
    return rows


def compared(name, ref_losses, losses, cosine, dtype) -> list[Row]:
    diffs = [abs(a - b) for a, b in zip(ref_losses, losses)]
    if dtype == torch.float32:
        nll = Row(
            "correctness",
            f"{name}: max |NLL - fp64|",
            max(diffs),
            f"< {NLL_ABS_FP32}",
            max(diffs) < NLL_ABS_FP32,
        )
        limit = COSINE_FP32
    else:
        rel = max(d / abs(r) for d, r in zip(diffs, ref_losses))
        nll = Row(
            "correctness",
            f"{name}: max rel. NLL diff",
            rel,
            f"< {NLL_REL_BF16}",
            rel < NLL_REL_BF16,
        )
        limit = COSINE_BF16
    detail = "NLL per segment " + ", ".join(f"{x:.6f}" for x in losses)
    nll.detail = detail if all(map(math.isfinite, losses)) else "non-finite NLL: " + detail
    nll.ok = nll.ok and all(map(math.isfinite, losses))
    cos = Row(
        "correctness", f"{name}: gradient cosine vs fp64", cosine, f"> {limit}", cosine > limit
    )
    return [nll, cos]


def efficient_attention_step(config, batches, device, name) -> Row:
    """A bf16 forward + backward with SDPA limited to its memory-efficient kernel."""
    row = Row(
        "correctness", f"{name} bf16 step in SDPA's memory-efficient kernel", None, "runs", None
    )
    if device.type != "cuda":
        row.detail = "skipped: the memory-efficient kernel is CUDA's"
        return row
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = TransformerXL(config).to(device=device, dtype=torch.bfloat16).train()
    try:
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
            loss, _ = nll_and_grads(model, batches[:1], device)
        row.value, row.ok = loss[0], math.isfinite(loss[0])
    except RuntimeError as err:
        row.ok, row.detail = False, first_line(err)
    return row


def first_line(err: Exception) -> str:
    return (str(err).splitlines() or [type(err).__name__])[0][:200]


# ---- the engine through launch/pretrain.py ----


def prepare_data(raw: Path, work: Path) -> Path:
    """The raw train prefix and the first VALID_BYTES of valid, prepared with txl-prepare."""
    src = work / "src"
    src.mkdir(parents=True)
    (src / "wiki.train.tokens").symlink_to((raw / "wiki.train.tokens").resolve())
    with open(raw / "wiki.valid.tokens", encoding="utf-8") as f:
        (src / "wiki.valid.tokens").write_text(f.read(VALID_BYTES).rsplit("\n", 1)[0] + "\n")
    out = work / "wt103"
    args = ["--dataset", "wikitext-103", "--source", str(src), "--out", str(out), "--no-progress"]
    if prepare_main(args) != 0:
        sys.exit(f"txl-prepare failed on {raw}")
    return out


def pretrain(plan: Plan, data: Path, out: Path, settings: list[str], resume=None) -> list[dict]:
    """Run launch/pretrain.py to plan.engine_steps; its metrics.jsonl records."""
    values = [
        f"data.path={data}",
        f"train.out_dir={out}",
        f"train.max_steps={plan.engine_steps}",
        f"train.save_interval={plan.engine_steps // 2}",
        "train.eval_interval=0",
        "data.test_split=null",
        "logging.log_interval=1",
        "logging.wandb.mode=disabled",
        *plan.engine_settings,
        *settings,
    ]
    cmd = [sys.executable, str(REPO / "launch/pretrain.py"), "--config"]
    cmd += [str(REPO / "configs" / f"{plan.engine_config}.json")]
    cmd += [arg for value in values for arg in ("--set", value)]
    cmd += ["--resume", resume] if resume else []
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"pretrain exited {proc.returncode}: {proc.stderr[-2000:]}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def engine_rows(
    plan: Plan, device: torch.device, raw: Path | None, work: Path, out: Path
) -> list[Row]:
    if raw is None:
        return [Row("engine", "engine runs", None, "", None, "skipped: no --data")]
    data = prepare_data(raw, work / "data")
    traced = plan.engine_steps * 3 // 5
    runs = [("ZeRO-2 bf16", [f"train.profile_steps=[{traced},{traced + 1}]"])]
    at_end = f"train.save_interval={plan.engine_steps}"  # one save: only ZeRO-2's is resumed
    runs.append(("ZeRO-3 bf16", ["deepspeed.zero_optimization.stage=3", at_end]))
    # From 2**32 the first steps must overflow: the scale has to move within plan.engine_steps
    fp16 = ["deepspeed.bf16.enabled=false", "deepspeed.fp16.enabled=true", at_end]
    fp16.append("deepspeed.fp16.initial_scale_power=32")
    runs += [("ZeRO-2 fp16", fp16)] if plan.fp16 and device.type == "cuda" else []
    rows, first_losses = [], {}
    for i, (label, settings) in enumerate(runs):
        name = f"{plan.engine_config} {label}"
        try:
            records = pretrain(plan, data, work / f"run{i}", settings)
        except RuntimeError as err:
            rows.append(Row("engine", name, None, "runs", False, str(err)))
            continue
        rows += run_rows(plan, name, records, work / f"run{i}")
        if label == "ZeRO-2 bf16":
            rows.append(resume_row(plan, name, data, records, work, device))
            rows.append(trace_row(name, work / "run0" / "profile", out))
        if label == "ZeRO-2 fp16":
            rows.append(fp16_row(name, records))
        first_losses[label] = steps_of(records)[0]["loss"]
    if "ZeRO-3 bf16" in first_losses and "ZeRO-2 bf16" in first_losses:
        diff = abs(first_losses["ZeRO-3 bf16"] - first_losses["ZeRO-2 bf16"])
        name = f"{plan.engine_config} ZeRO-3 bf16: first loss - ZeRO-2's (same initial weights)"
        rows.append(Row("engine", name, diff, "<= 1e-3", diff <= 1e-3))
    return rows


def trace_row(name: str, profile: Path, out: Path) -> Row:
    """train.profile_steps wrote rank 0's trace; it comes back gzipped (Perfetto opens it)."""
    traces = sorted(profile.glob("rank0-*.json")) if profile.is_dir() else []
    if traces:
        with open(traces[0], "rb") as src, gzip.open(out / "trace-rank0.json.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
    detail = f"{traces[0].name} -> trace-rank0.json.gz" if traces else "no trace written"
    return Row(
        "engine",
        f"{name}: train.profile_steps trace",
        len(traces),
        "1 file",
        len(traces) == 1,
        detail,
    )


def steps_of(records: list[dict]) -> list[dict]:
    return [r for r in records if "split" not in r]


def run_rows(plan: Plan, name: str, records, out: Path) -> list[Row]:
    train = steps_of(records)
    losses = [r["loss"] for r in train]
    k = max(1, len(losses) // 5)
    first, last = statistics.mean(losses[:k]), statistics.mean(losses[-k:])
    evals = [r for r in records if r.get("split") == "valid"]
    saved = (out / "checkpoints" / f"global_step{plan.engine_steps}").is_dir()
    steady = train[len(train) // 2 :]
    tokens_per_s = statistics.median(r["tokens_per_s"] for r in steady)
    mfu = steady[-1].get("mfu")
    rows = [
        Row("engine", f"{name}: loss falls", last, f"< first steps' {first:.3f}", last < first),
        Row("engine", f"{name}: checkpoint saved", plan.engine_steps, "step", saved),
        Row(
            "engine",
            f"{name}: evaluation",
            evals[-1]["loss"] if evals else None,
            "finite",
            bool(evals) and math.isfinite(evals[-1]["loss"]),
        ),
        Row(
            "engine",
            f"{name}: tokens/s",
            tokens_per_s,
            "tokens/s",
            None,
            f"MFU {mfu:.3f}" if mfu is not None else "MFU: no known peak",
        ),
    ]
    rows.append(memory_row(name, steady[-1]["memory_gib"], out))
    return rows


def memory_row(name: str, measured_gib: float, out: Path) -> Row:
    """Peak memory against txl-inspect's estimate for one rank (model states + activations),
    for the run's effective config (OUT_DIR/config.json)."""
    config = run_config_from_dict(json.loads((out / "config.json").read_text()))
    plan = config.plan(1)
    estimate = rank_memory_bytes(
        config.model, config.zero_stage, 1, plan.micro_rows, plan.dtype_bytes
    )
    return Row(
        "engine",
        f"{name}: peak memory / estimate",
        measured_gib * 2**30 / estimate,
        "ratio",
        None,
        f"{measured_gib:.2f} GiB vs {estimate / 2**30:.2f} GiB",
    )


def resume_row(plan: Plan, name: str, data: Path, records, work: Path, device) -> Row:
    """Resume from the middle checkpoint: the same losses after it (exactly on CPU)."""
    half = plan.engine_steps // 2
    checkpoint = work / "run0" / "checkpoints" / f"global_step{half}"
    try:
        resumed = pretrain(plan, data, work / "resumed", [], resume=str(checkpoint))
    except RuntimeError as err:
        return Row("engine", f"{name}: resume", None, "runs", False, str(err))
    before = {r["step"]: r["loss"] for r in steps_of(records) if r["step"] > half}
    after = {r["step"]: r["loss"] for r in steps_of(resumed)}
    if sorted(after) != sorted(before):
        return Row("engine", f"{name}: resume", None, "same steps", False, f"steps {sorted(after)}")
    diffs = [abs(before[s] - after[s]) for s in sorted(before)]
    first_exact = diffs[0] == 0.0
    tolerance = 0.0 if device.type == "cpu" else 1e-2  # GPU: atomics in attention's backward
    return Row(
        "engine",
        f"{name}: resume repeats the losses",
        max(diffs),
        f"first exact, rest <= {tolerance}",
        first_exact and max(diffs) <= tolerance,
        f"first step after resume: |diff| {diffs[0]:.3g}",
    )


def fp16_row(name: str, records) -> Row:
    """Dynamic loss scaling: the scale moves, and every overflow it skipped is counted."""
    scales = [r["loss_scale"] for r in steps_of(records)]
    drops = sum(b < a for a, b in zip(scales, scales[1:]))  # one per overflow step skipped
    skipped = steps_of(records)[-1]["skipped_steps"]
    ok = len(set(scales)) > 1 and skipped >= drops
    detail = f"loss scale {scales[0]} -> {scales[-1]}, {drops} drops, {skipped} steps counted"
    return Row(
        "engine", f"{name}: overflow steps skipped and counted", skipped, ">= drops", ok, detail
    )


# ---- speed ----


def time_steps(step: Callable[[], None], device, warmup: int, steps: int) -> float:
    """Median seconds of `steps` calls after `warmup`, the device drained around each."""
    return time_alternating([step], device, warmup, steps)[0]


def time_alternating(steps: list[Callable], device, warmup: int, rounds: int) -> list[float]:
    """Median seconds of each of `steps` over `rounds` rounds that call each once, in turn,
    after `warmup` calls of each: steps compared this way meet the same machine (a host-bound
    step's time drifts by a fifth from one second to the next)."""
    for step in steps:
        for _ in range(warmup):
            step()
    times = [[] for _ in steps]
    for _ in range(rounds):
        for step, kept in zip(steps, times):
            synchronize(device)
            start = time.perf_counter()
            step()
            synchronize(device)
            kept.append(time.perf_counter() - start)
    return [statistics.median(kept) for kept in times]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def speed_rows(
    plan: Plan, device: torch.device, reference: Path | None, data: Path | None, work: Path
) -> list[Row]:
    rows = []
    tree = reference_tree(reference, work / "reference") if reference else None
    if tree is None:
        rows.append(
            Row(
                "speed",
                "reference MemTransformerLM",
                None,
                "",
                None,
                "skipped: no --reference (a kimiyoung/transformer-xl checkout)",
            )
        )
    for name, overrides, micros in plan.speed:
        config = model_config(name, overrides)
        for micro in micros:
            shipped = micro == micros[0]
            rows += config_speed(plan, name, config, micro, device, tree, shipped, data)
    if tree is not None:
        name, overrides, micros = plan.speed[-1]  # large's shapes on the GPU
        rows += attention_alone(plan, name, model_config(name, overrides), micros[0], device, tree)
    return rows


def attention_alone(plan, name, config, micro, device, tree) -> list[Row]:
    """One attention layer in bf16, forward + backward with full memory: ours against the
    reference's RelPartialLearnableMultiHeadAttn (einsum + rel_shift), time-major as it is."""
    sys.path[:0] = [str(tree), str(tree / "utils")]
    from mem_transformer import RelPartialLearnableMultiHeadAttn

    c, bf16 = config, dict(device=device, dtype=torch.bfloat16)
    q, m = c.tgt_len, c.mem_len
    torch.manual_seed(0)
    ours = RelMultiHeadAttention(c).to(**bf16).train()
    args = (c.n_head, c.d_model, c.d_head, c.dropout)
    theirs = RelPartialLearnableMultiHeadAttn(*args, dropatt=c.dropatt, tgt_len=q, mem_len=m)
    theirs.to(**bf16).train()
    h = torch.randn(micro, q, c.d_model, **bf16, requires_grad=True)
    mem = torch.randn(micro, m, c.d_model, **bf16)
    pos_enc = sinusoid_encoding(relative_distances(q + m, -1, device), c.d_model).to(torch.bfloat16)
    u, v = (torch.randn(c.n_head, c.d_head, **bf16, requires_grad=True) for _ in range(2))
    bias = attention_bias(q, m, m, False, device)
    causal = torch.triu(torch.ones(q, q + m, dtype=torch.bool, device=device), 1 + m)[:, :, None]
    h_t, mem_t = h.detach().transpose(0, 1).requires_grad_(), mem.transpose(0, 1)

    def our_layer():
        ours(h, mem, pos_enc, u, v, bias).float().sum().backward()

    def their_layer():
        theirs(h_t, pos_enc[:, None], u, v, attn_mask=causal, mems=mem_t).float().sum().backward()

    ms = {
        label: 1000 * time_steps(step, device, warmup=3, steps=plan.speed_steps)
        for label, step in (("ours", our_layer), ("reference", their_layer))
    }
    label = f"attention alone, {name} shapes, micro {micro}, bf16"
    return [
        Row("speed", f"{label}: ours", ms["ours"], "ms", None),
        Row("speed", f"{label}: reference", ms["reference"], "ms", None),
        Row("speed", f"{label}: x reference", ms["reference"] / ms["ours"], "ratio", None),
    ]


def speed_tokens(config, micro: int, data: Path | None, device) -> tuple[torch.Tensor, str]:
    """A speed row's [micro, tgt_len + 1] ids on the device and their kind: the prefix's text
    when there is one (--data), else uniform."""
    if data is None:
        return uniform_tokens(config.n_token, micro, config.tgt_len + 1).to(device), "uniform"
    return corpus_tokens(data, config.n_token, micro, config.tgt_len + 1).to(device), "corpus"


def config_speed(plan, name, config, micro, device, tree, shipped: bool, data) -> list[Row]:
    """Our bf16 (module cast, as DeepSpeed's bf16 engine) model at one micro batch, on real
    text's ids where --data gives them; at the shipped micro batch also on uniform ids,
    compiled, in fp32, and the reference in fp32 and bf16 autocast."""
    torch.manual_seed(0)
    tokens, kind = speed_tokens(config, micro, data, device)
    label = f"{name} micro {micro}"
    try:
        model = TransformerXL(config).to(device).train()
        bf16 = copy.deepcopy(model).to(torch.bfloat16)
        runs = {"bf16": plain_step(bf16, tokens)}
        if shipped:
            if kind == "corpus":
                uniform = uniform_tokens(config.n_token, micro, config.tgt_len + 1).to(device)
                runs["bf16 uniform targets"] = plain_step(bf16, uniform)
            runs["fp32"] = plain_step(model, tokens)
            if plan.compile:
                compiled = copy.deepcopy(model).to(torch.bfloat16)
                compile_layers(compiled)
                runs["bf16 compiled"] = plain_step(compiled, tokens)
            if tree is not None:
                with torch.device(device):  # the reference builds on the default device
                    reference = reference_step(model, tokens, str(tree))
                runs["reference fp32"] = reference
                runs["reference bf16 autocast"] = autocast(reference, device)
        return measured(plan, label, config, micro, runs, device, kind)
    except torch.OutOfMemoryError:
        return [Row("speed", label, None, "", None, "does not fit in memory")]
    finally:
        torch.cuda.empty_cache() if device.type == "cuda" else None


def lever_rows(plan: Plan, device: torch.device, data: Path | None) -> list[Row]:
    """Each lever off and on at each config's shipped micro batch, bf16, everything else as
    shipped: the ratio of tokens/s on to off, and the largest difference of the losses of
    LEVER_STEPS steps with dropout off (exact levers: bf16 rounding only)."""
    rows = []
    for name, overrides, micros in plan.speed:
        config, micro = model_config(name, overrides), micros[0]
        tokens, kind = speed_tokens(config, micro, data, device)
        models = {}
        for dropout in (True, False):  # timed with the config's dropout, compared without
            torch.manual_seed(0)
            c = config if dropout else dataclasses.replace(config, dropout=0.0, dropatt=0.0)
            models[dropout] = TransformerXL(c).to(device=device, dtype=torch.bfloat16).train()
        for lever in LEVERS:
            if lever.switch.startswith("train.") and not plan.compile:  # compile, graphs: GPU
                continue
            label = f"{name} micro {micro}: {lever.name}, on / off"
            try:
                row = lever_row(plan, label, lever, models, tokens, device, micro * config.tgt_len)
            except Exception as err:  # noqa: BLE001 - one lever's failure must not cost the rest
                traceback.print_exc()
                row = Row("levers", label, None, "ratio", False, first_line(err))
            row.targets = kind
            rows.append(row)
        del models
        torch.cuda.empty_cache() if device.type == "cuda" else None
    return rows


def lever_row(plan, label, lever, models, tokens, device, step_tokens: int) -> Row:
    steps = [lever.step(models[True], tokens, on) for on in (False, True)]
    off, on = time_alternating(steps, device, 3, 2 * plan.speed_steps)
    rates = {False: step_tokens / off, True: step_tokens / on}
    losses = [lever_losses(lever, models[False], tokens, on) for on in (False, True)]
    gap = max(abs(a - b) for a, b in zip(*losses))
    detail = (
        f"off {rates[False]:.0f}, on {rates[True]:.0f} tokens/s; "
        f"max |loss on - off| {gap:.2e} without dropout; {lever.switch}"
    )
    return Row("levers", label, rates[True] / rates[False], "ratio", None, detail)


LEVER_STEPS = 4  # the first with empty memory, then full: both shapes of a graph or compile


def lever_losses(lever, model, tokens, on: bool) -> list[float]:
    step = lever.step(copy.deepcopy(model), tokens, on)
    return [step().item() for _ in range(LEVER_STEPS)]


def autocast(step: Callable[[], None], device: torch.device) -> Callable[[], None]:
    def autocast_step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            step()

    return autocast_step


def measured(plan, label, config, micro, runs, device, kind: str) -> list[Row]:
    tokens = micro * config.tgt_len
    flops = train_flops_per_token(config, micro)
    rates, rows = {}, []
    for run, step in runs.items():
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        try:
            rates[run] = tokens / time_steps(step, device, warmup=3, steps=plan.speed_steps)
        except RuntimeError as err:  # the reference's adaptive input refuses bf16 autocast
            rows.append(Row("speed", f"{label} {run}", None, "runs", None, first_line(err)))
            continue
        peak = device_peak_tflops(device, low_precision="bf16" in run)
        detail = f"MFU {flops * rates[run] / (peak * 1e12):.3f}" if peak else "MFU: no known peak"
        if run == "bf16" and device.type == "cuda":
            used = torch.cuda.max_memory_allocated(device)
            estimate = activation_bytes_per_row(config, 2) * micro + 4 * sum(
                p.numel() for p in TransformerXL(config, init_weights=False).parameters()
            )  # bf16 weights and gradients
            detail += f"; peak memory {used / 2**30:.2f} GiB, estimate {estimate / 2**30:.2f}"
        row = Row("speed", f"{label} {run}: tokens/s", rates[run], "tokens/s", None, detail)
        row.targets = "uniform" if "uniform" in run else kind
        if run == "bf16":
            row.busy, row.breakdown = profile_step(step, device)
            row.detail += f"; busy {row.busy:.0%}"
        rows.append(row)
    for ours, ref in (("fp32", "reference fp32"), ("bf16", "reference bf16 autocast")):
        if ref in rates:
            rows.append(
                Row(
                    "speed", f"{label} {ours}: x reference", rates[ours] / rates[ref], "ratio", None
                )
            )
    if "bf16 compiled" in rates:
        rows.append(
            Row(
                "speed",
                f"{label}: compiled x eager",
                rates["bf16 compiled"] / rates["bf16"],
                "ratio",
                None,
            )
        )
    return rows


# ---- the report ----


def table(rows: list[Row]) -> str:
    lines = [f"{'':4} {'section':<11} {'check':<62} {'value':>12}  limit / detail"]
    for r in rows:
        mark = {True: "ok", False: "FAIL", None: "-"}[r.ok]
        value = "" if r.value is None else f"{r.value:12.6g}"
        lines.append(f"{mark:4} {r.section:<11} {r.name:<62} {value:>12}  {r.limit} {r.detail}")
    return "\n".join(lines)


class Report:
    """The rows so far, rewritten to OUT/gpu_check.json after each section: a run stopped at its
    time limit still leaves what it measured."""

    def __init__(self, path: Path, device: torch.device, quick: bool):
        self.path, self.rows, self.seconds = path, [], {}
        self.header = {
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__,
            "quick": quick,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "seconds": self.seconds,
        }

    def section(self, name: str, rows: Callable[[], list[Row]]) -> None:
        start = time.perf_counter()
        try:
            new = rows()
        except Exception as err:  # noqa: BLE001 - one broken section must not cost the others
            traceback.print_exc()
            new = [Row(name, "the section ran to its end", None, "", False, first_line(err))]
        self.rows += new
        self.seconds[name] = round(time.perf_counter() - start, 1)
        report = {**self.header, "rows": [dataclasses.asdict(r) for r in self.rows]}
        self.path.write_text(json.dumps(report, indent=1))
        print(table(new), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--quick", action="store_true", help="tiny shapes, for CI on a CPU")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "runs/gpu_check")))
    parser.add_argument("--data", type=Path, help="raw WikiText-103 wiki.{train,valid}.tokens")
    parser.add_argument("--reference", type=Path, help="a kimiyoung/transformer-xl checkout")
    parser.add_argument(
        "--only",
        default="speed,levers,correctness,engine",
        help="the sections to run, comma-separated (a rerun of what a time limit cut off)",
    )
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device here; pass --device cpu for the CPU run")
    plan = QUICK if args.quick else FULL
    sections = {
        "correctness": lambda tmp: correctness_rows(plan, device),
        "engine": lambda tmp: engine_rows(plan, device, args.data, tmp, args.out),
        "speed": lambda tmp: speed_rows(plan, device, args.reference, args.data, tmp),
        "levers": lambda tmp: lever_rows(plan, device, args.data),
    }
    chosen = args.only.split(",")
    if unknown := [name for name in chosen if name not in sections]:
        sys.exit(f"gpu_check: --only takes {', '.join(sections)}; got {', '.join(unknown)}")
    args.out.mkdir(parents=True, exist_ok=True)
    report = Report(args.out / "gpu_check.json", device, args.quick)
    print(json.dumps(report.header), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in chosen:
            report.section(name, functools.partial(sections[name], Path(tmp)))
    print(json.dumps(report.seconds))
    return 1 if any(r.ok is False for r in report.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
