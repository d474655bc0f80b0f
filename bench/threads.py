"""The compute threads a command chooses, against torch's default and OMP_NUM_THREADS=1, on a
machine another busy process shares.

    python bench/threads.py [--data runs/data/wikitext-103] [--out runs/bench-threads]
                            [--steps 40] [--eval-tokens 20000] [--generate 200] [--repeats 2]
                            [--busy 1] [--no-idle] [--only training|txl-eval|txl-generate]

Three single-process commands: the tiny config trained for --steps steps (its tokens/s from
metrics.jsonl, the steps after the first log line), txl-eval --text of --eval-tokens tokens of
the valid split and txl-generate of --generate tokens (their wall times), all on a random model
of the tiny config over the data's vocabulary (made under --out once). Each runs with
OMP_NUM_THREADS set to the usable cores (torch's default, what the commands used before they
chose), set to 1, and unset (the commands' own choice), interleaved (the three settings in turn,
--repeats times) so a load that changes over the run touches all three alike; first beside
--busy processes that spin on a core each, then (unless --no-idle) without them. Printed: the
median of each, and the chosen threads' ratio to OMP_NUM_THREADS=1's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from txl_dist.process.threads import usable_cores

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def make_model(data: Path, out: Path) -> Path:
    """A random model of the tiny config over the data's vocabulary, saved as an export."""
    from data_pipeline.vocab import Vocab
    from txl_dist.model import TransformerXL, TXLConfig

    model_dir = out / "model"
    if not (model_dir / "config.json").exists():
        values = json.loads((ROOT / "configs" / "tiny.json").read_text())["model"]
        values["n_token"] = len(Vocab.load(str(data / "vocab.txt")))
        TransformerXL(TXLConfig(**values)).save_pretrained(model_dir)
        shutil.copy(data / "vocab.txt", model_dir / "vocab.txt")
    return model_dir


def eval_text(data: Path, out: Path, tokens: int) -> Path:
    """The first `tokens` words of WikiText-103's valid split, as txl-eval --text reads them."""
    path = out / "eval.txt"
    shared = ROOT.parent / "shared" / "data" / "wikitext-103" / "wiki.valid.tokens"
    lines, count = [], 0
    for line in shared.read_text(encoding="utf-8").splitlines(keepends=True):
        lines.append(line)
        count += len(line.split()) + 1
        if count >= tokens:
            break
    path.write_text("".join(lines), encoding="utf-8")
    return path


def timed(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{args[:3]} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return time.perf_counter() - started, proc.stdout + proc.stderr


def train_tokens_per_s(args: argparse.Namespace, env: dict[str, str]) -> float:
    run = args.out / "run"
    settings = [
        f"data.path={args.data}", f"train.out_dir={run}", f"train.max_steps={args.steps}",
        "train.eval_interval=0", "train.save_interval=0", "logging.log_interval=5",
        "data.test_split=null", "data.valid_split=null", "logging.wandb.mode=disabled",
    ]  # fmt: skip
    command = [sys.executable, "launch/pretrain.py", "--config", "configs/tiny.json", "--overwrite"]
    timed(command + [a for s in settings for a in ("--set", s)], env)
    with open(run / "metrics.jsonl") as f:
        rows = [r for r in map(json.loads, f) if "tokens_per_s" in r and r.get("split") is None]
    return statistics.mean(r["tokens_per_s"] for r in rows[1:] or rows)


def workloads(args: argparse.Namespace, model: Path, text: Path) -> dict:
    """Each workload's measure: (what it is, higher is better, the function of an env)."""
    evaluate = [str(BIN / "txl-eval"), "--model", str(model), "--text", str(text), "--no-progress"]
    generate = [str(BIN / "txl-generate"), "--model", str(model), "--prompt", "the",
                "--max-tokens", str(args.generate), "--seed", "0"]  # fmt: skip
    return {
        "training tokens/s": (True, lambda env: train_tokens_per_s(args, env)),
        "txl-eval s": (False, lambda env: timed(evaluate, env)[0]),
        "txl-generate s": (False, lambda env: timed(generate, env)[0]),
    }


@contextmanager
def busy(processes: int):
    """`processes` Python processes spinning, one core each."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)
    ]
    try:
        time.sleep(1)
        yield
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()


def measure(args: argparse.Namespace, model: Path, text: Path, label: str) -> None:
    cores = usable_cores()
    base = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    settings = {f"default ({cores})": str(cores), "OMP=1": "1", "chosen": None}
    for name, (higher, run) in workloads(args, model, text).items():
        if args.only and not name.startswith(args.only):
            continue
        found: dict[str, list[float]] = {s: [] for s in settings}
        for _ in range(args.repeats):
            for setting, threads in settings.items():
                env = {**base, **({"OMP_NUM_THREADS": threads} if threads else {})}
                found[setting].append(run(env))
        medians = {s: statistics.median(v) for s, v in found.items()}
        ratio = medians["OMP=1"] / medians["chosen"] if higher else medians["chosen"] / medians[
            "OMP=1"]  # fmt: skip
        shown = "  ".join(f"{s} {m:,.1f}" for s, m in medians.items())
        print(f"{label:10} {name:18} {shown}  chosen/OMP=1 cost x{ratio:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT / "runs" / "data" / "wikitext-103")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-threads")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--eval-tokens", type=int, default=20_000)
    parser.add_argument("--generate", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--busy", type=int, default=1)
    parser.add_argument("--no-idle", action="store_true")
    parser.add_argument("--only", choices=["training", "txl-eval", "txl-generate"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model, text = make_model(args.data, args.out), eval_text(args.data, args.out, args.eval_tokens)
    load = re.sub(r"\s+", " ", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {usable_cores()} cores, "
          f"load average {load}", flush=True)  # fmt: skip
    with busy(args.busy):
        measure(args, model, text, f"{args.busy} busy")
    if not args.no_idle:
        measure(args, model, text, "no spinner")


if __name__ == "__main__":
    main()
