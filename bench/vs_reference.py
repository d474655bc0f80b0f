"""The tiny config trained by txl-dist and by the reference train.py, side by side in one run.

    python bench/vs_reference.py --reference PATH/transformer-xl --data runs/data/wikitext-103 \
        [--steps 600] [--rounds 1] [--baseline PATH]

PATH/transformer-xl is a checkout of kimiyoung/transformer-xl (never part of this repo). Its
`pytorch/` directory is copied to a temporary directory with the two fixes its CPU run needs on
today's torch (`.byte()` masks -> `.bool()`, and no CUDA-version probe) and the tiny config's
adaptive-softmax cutoffs in place of its WikiText-103 ones. It trains on the same tokens: the
prepared train split is written back out as text, a line per `<eos>`, which the reference
tokenizes into the same ids (its vocabulary is built by count from train, as ours).

Runs, each 8 rows x 64 tokens, the same model, seed, optimizer (Adam 2.5e-4, 50 warm-up steps,
cosine to 0 at --steps), clipping 0.25 and dropout 0.1:
  - the reference `train.py`, one process, fp32, all the machine's threads;
  - `python launch/pretrain.py --config configs/tiny.json`, one process, fp32 ZeRO-0;
  - `deepspeed --num_gpus 2 launch/pretrain.py --config configs/tiny.json` (ZeRO-2 bf16, as
    shipped).
With --baseline PATH (another txl-dist checkout, e.g. `git archive main | tar -x -C PATH`), its
1-process run takes turns with the others, for a change's before and after in the same rounds.

Prints tokens/s over all steps after the first log window (start-up and first steps excluded
for every run alike), the ratio to the reference of the same round and the mean loss of the
windows ending at 100, 300 and the last step. On a machine shared with other jobs the speed of
a run swings by a quarter from minute to minute: --rounds N repeats the three runs N times,
every other round in reverse order, and prints the median ratio with its range.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

import fsspec

from data_pipeline.shards.format import load_manifest, manifest_url, shard_url
from data_pipeline.shards.samples import decode_sample
from data_pipeline.vocab import Vocab

REPO = Path(__file__).resolve().parents[1]
TINY = json.loads((REPO / "configs" / "tiny.json").read_text())
ROWS, TGT_LEN = TINY["train"]["global_rows"], TINY["model"]["tgt_len"]
LOG_INTERVAL = 20
REFERENCE = "reference train.py, 1 process, fp32"
FIXES = {  # file -> [(old, new)]: what the reference needs to run on CPU with today's torch
    "mem_transformer.py": [(".byte()", ".bool()")],
    "utils/proj_adaptive_softmax.py": [
        ("int(torch.version.cuda.split('.')[0])", "0"),
        ("int(torch.version.cuda.split('.')[1])", "0"),
    ],
    "train.py": [
        (
            "cutoffs = [20000, 40000, 200000]",
            f"cutoffs = {TINY['model']['cutoffs']}",
        )
    ],
}


def split_text(data: str, split: str, vocab: Vocab, max_tokens: int | None = None) -> str:
    """A prepared split as WikiText-style text: tokens joined by spaces, a line per <eos>."""
    url = manifest_url(data, split)
    manifest = load_manifest(url)
    ids = []
    for shard in manifest.shards:
        with fsspec.open(shard_url(url, shard), "rb") as f:
            blob = f.read()
        for i in range(len(shard.sample_tokens)):
            span = blob[slice(*shard.sample_span(i))]
            ids.extend(decode_sample(span, shard, i, url, manifest.vocab_size)[0].tolist())
    words = vocab.decode(ids[:max_tokens])
    return " ".join(words).replace(" <eos> ", "\n").replace("<eos>", "\n").strip(" ") + "\n"


def reference_tree(reference: Path, into: Path) -> Path:
    """A fixed copy of the reference's pytorch/ directory."""
    if not (reference / "pytorch" / "train.py").is_file():
        sys.exit(f"{reference}: no pytorch/train.py; give a kimiyoung/transformer-xl checkout")
    tree = into / "pytorch"
    shutil.copytree(reference / "pytorch", tree)
    for name, fixes in FIXES.items():
        path = tree / name
        text = path.read_text()
        for old, new in fixes:
            if old not in text:
                sys.exit(f"{reference}: {name} has no {old!r}; is this kimiyoung/transformer-xl?")
            text = text.replace(old, new)
        path.write_text(text)
    return tree


def run_reference(
    tree: Path, corpus: Path, work: Path, steps: int
) -> list[tuple[int, float, float]]:
    """(step, ms per step, loss) of each log window of the reference's train.py."""
    m = TINY["model"]
    args = {
        "--dataset": "wt103",
        "--data": corpus,
        "--work_dir": work,
        "--adaptive": None,
        "--div_val": m["div_val"],
        "--n_layer": 4,
        "--n_head": m["n_head"],
        "--d_head": 32,
        "--d_model": m["d_model"],
        "--d_embed": m["d_embed"],
        "--d_inner": m["d_inner"],
        "--dropout": 0.1,
        "--dropatt": 0.0,
        "--optim": "adam",
        "--lr": 0.00025,
        "--warmup_step": TINY["optim"]["warmup_steps"],
        "--max_step": steps,
        "--tgt_len": TGT_LEN,
        "--mem_len": m["mem_len"],
        "--eval_tgt_len": TGT_LEN,
        "--batch_size": ROWS,
        "--log-interval": LOG_INTERVAL,
        "--eval-interval": steps,
        "--max_eval_steps": 1,
        "--seed": 1111,
    }
    argv = [str(a) for k, v in args.items() for a in ((k,) if v is None else (k, v))]
    # It caches the tokenized corpus as a pickle that today's torch.load refuses to read back.
    (corpus / "cache.pt").unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "train.py", *argv], cwd=tree, capture_output=True, text=True
    )
    windows = [
        (int(step), float(ms), float(loss))
        for step, ms, loss in re.findall(
            r"step +(\d+) \|.*?\| ms/batch +([\d.]+) \| loss +([\d.]+)", proc.stdout
        )
    ]
    # It ends by loading its best model with a torch.load that today's torch refuses for whole
    # pickled modules: a failure after its last log line is not a training failure.
    if not windows or windows[-1][0] != steps:
        sys.exit(f"the reference stopped early (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return windows


def run_ours(data: str, launcher: list[str], settings: list[str], out: Path, tree: Path = REPO):
    """(step, ms per step, loss) of each log window of txl-dist's tiny config, as the checkout
    at `tree` trains it."""
    values = [
        f"data.path={data}",
        f"train.out_dir={out}",
        f"logging.log_interval={LOG_INTERVAL}",
        "train.eval_interval=0",
        "train.save_interval=0",
        "train.eval_rows=64",  # the unavoidable final evaluation, made short
        "data.test_split=null",
        "logging.wandb.mode=disabled",
        *settings,
    ]
    cmd = [*launcher, str(tree / "launch/pretrain.py"), "--config", str(tree / "configs/tiny.json")]
    cmd += [arg for value in values for arg in ("--set", value)]
    env = {**os.environ, "PYTHONPATH": str(tree)}  # its packages, not the installed checkout's
    subprocess.run(
        cmd, check=True, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], 1000 * r["step_time_s"], r["loss"]) for r in rows if "split" not in r]


def summary(windows: list[tuple[int, float, float]]) -> tuple[float, dict[int, float]]:
    """tokens/s after the first window, and the loss of each window by its last step."""
    steady = windows[1:]
    seconds = sum(ms * LOG_INTERVAL / 1000 for _, ms, _ in steady)
    return ROWS * TGT_LEN * LOG_INTERVAL * len(steady) / seconds, {
        step: loss for step, _, loss in windows
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, required=True, help="kimiyoung/transformer-xl")
    parser.add_argument("--data", required=True, help="a prepared WikiText-103 root")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=1, help="repeat all runs, taking turns")
    parser.add_argument("--baseline", type=Path, help="another checkout: its 1-process run too")
    args = parser.parse_args()
    if args.steps % LOG_INTERVAL or args.steps < 300:
        sys.exit(f"--steps must be a multiple of {LOG_INTERVAL}, at least 300")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        vocab = Vocab.load(f"{args.data}/vocab.txt")
        corpus = tmp / "corpus"
        corpus.mkdir()
        (corpus / "train.txt").write_text(split_text(args.data, "train", vocab))
        for split in ("valid", "test"):  # read by the reference, barely evaluated
            (corpus / f"{split}.txt").write_text(split_text(args.data, "valid", vocab, 2000))
        tree = reference_tree(args.reference, tmp)

        fp32 = ["deepspeed.zero_optimization.stage=0", "deepspeed.bf16.enabled=false"]
        deepspeed = [str(Path(sys.executable).parent / "deepspeed"), "--num_gpus", "2"]
        steps = [f"train.max_steps={args.steps}"]
        runs = {
            REFERENCE: lambda out: run_reference(tree, corpus, out, args.steps),
            "txl-dist python, 1 process, fp32 ZeRO-0": lambda out: run_ours(
                args.data, [sys.executable], steps + fp32, out
            ),
            "txl-dist deepspeed, 2 ranks, ZeRO-2 bf16": lambda out: run_ours(
                args.data, deepspeed, steps, out
            ),
        }
        if args.baseline:
            runs["baseline python, 1 process, fp32 ZeRO-0"] = lambda out: run_ours(
                args.data, [sys.executable], steps + fp32, out, args.baseline.resolve()
            )
        rounds = []
        for r in range(args.rounds):
            # Every other round runs in reverse order, so a slow spell of a shared machine
            # does not always land on the same run.
            names = list(runs) if r % 2 == 0 else list(reversed(runs))
            rounds.append({name: runs[name](tmp / f"{r}-{i}") for i, name in enumerate(names)})

    marks = sorted({100, 300, args.steps})
    print(f"tiny config, {args.steps} steps of {ROWS} x {TGT_LEN} tokens, {os.cpu_count()} CPUs")
    print(
        f"{'round':>5} {'run':<42} {'tokens/s':>9} {'x ref':>6} "
        + " ".join(f"loss@{s:<4}" for s in marks)
    )
    ratios = {name: [] for name in runs}
    for r, windows_by_name in enumerate(rounds, start=1):
        base = summary(windows_by_name[REFERENCE])[0]
        for name in runs:
            tokens_per_s, losses = summary(windows_by_name[name])
            ratios[name].append(tokens_per_s / base)
            row = " ".join(f"{losses[s]:9.3f}" for s in marks)
            print(f"{r:>5} {name:<42} {tokens_per_s:9.0f} {tokens_per_s / base:6.2f} {row}")
    if args.rounds > 1:
        print("x ref over the rounds, median (min - max):")
        for name, values in ratios.items():
            if name != REFERENCE:
                print(f"  {name:<42} {median(values):.2f} ({min(values):.2f} - {max(values):.2f})")


if __name__ == "__main__":
    main()
