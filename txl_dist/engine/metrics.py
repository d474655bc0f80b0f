"""Run metrics: a console line, metrics.jsonl and wandb, all from rank 0.

A wandb failure is reported once and then wandb is left alone: tracking must never stop training.
"""

from __future__ import annotations

import contextlib
import json
import logging
import netrc
import os
import subprocess
import sys
import time
import urllib.parse
from typing import Any

import torch
import torch.distributed as dist

from data_pipeline import redact, redact_text
from txl_dist.config.sections import WandbConfig
from txl_dist.evaluation.scores import format_score
from txl_dist.files import open_append
from txl_dist.logs import libraries_quiet

log = logging.getLogger(__name__)

WANDB_DEFAULT_URL = "https://api.wandb.ai"


def wandb_mode(mode: str) -> str:
    """`auto` means online only when credentials for the configured wandb host exist."""
    if mode != "auto":
        return mode
    return "online" if has_wandb_credentials() else "offline"


def has_wandb_credentials() -> bool:
    """WANDB_API_KEY, or a netrc entry for WANDB_BASE_URL's host (not any netrc at all)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urllib.parse.urlparse(os.environ.get("WANDB_BASE_URL", WANDB_DEFAULT_URL)).hostname
    try:
        entry = netrc.netrc(os.environ.get("NETRC")).authenticators(host or "")
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(entry and entry[2])


@contextlib.contextmanager
def own_wandb_service():
    """Run wandb's backend outside this process's tree, unless WANDB_SERVICE names one already.

    DeepSpeed's launcher answers Ctrl-C by terminating every descendant of each rank, wandb's
    backend included, before rank 0 has saved its checkpoint and closed the run; a detached
    backend (wandb's own `wandb beta core start`) lives while this process is connected to it,
    then exits idle. WANDB_SERVICE is set only while wandb connects, not for child processes.
    """
    if os.environ.get("WANDB_SERVICE"):
        yield
        return
    started = subprocess.run(
        [sys.executable, "-m", "wandb", "beta", "core", "start", "--idle-timeout", "10s"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    os.environ["WANDB_SERVICE"] = started.stdout.strip()
    try:
        yield
    finally:
        del os.environ["WANDB_SERVICE"]


class Metrics:
    """Writes records on rank 0; other ranks' calls do nothing."""

    def __init__(self, out_dir: str, enabled: bool, run: dict[str, Any]):
        self.enabled = enabled
        self.path = os.path.join(out_dir, "metrics.jsonl")
        self.run = run  # written into every metrics.jsonl row
        self.wandb = None
        self.evaluations: dict[str, dict[str, Any]] = {}  # the latest record of each split

    def start_wandb(self, cfg: WandbConfig, out_dir: str, config: dict, run_id: str) -> None:
        """Start (or resume, with the same id) the wandb run."""
        mode = wandb_mode(cfg.mode)
        if not self.enabled or mode == "disabled":
            return
        try:
            import wandb

            with own_wandb_service():
                self.wandb = wandb.init(
                    project=cfg.project,
                    entity=cfg.entity,
                    name=cfg.name or os.path.basename(os.path.normpath(out_dir)),
                    dir=cfg.dir or out_dir,
                    mode=mode,
                    config=redact(config),
                    id=run_id,
                    resume="allow",
                    # No command line, code or git state: --set arguments may carry credentials.
                    # Quiet: no banner, no run history drawn at the end (txl_dist.logs).
                    settings=wandb.Settings(
                        x_disable_meta=True,
                        save_code=False,
                        disable_code=True,
                        disable_git=True,
                        quiet=libraries_quiet(),
                    ),
                )
        except Exception as err:  # noqa: BLE001 - any wandb failure must leave training running
            self._wandb_failed(err)

    def _wandb_failed(self, err: Exception) -> None:
        message = redact_text(repr(err))
        log.warning(f"wandb disabled after an error: {message}")
        self.wandb = None
        try:  # now, quietly: wandb's own exit hook would print a traceback of the same error
            import wandb

            wandb.teardown()
        except Exception:  # noqa: BLE001, S110 - already reported above
            pass

    def log(self, record: dict[str, Any], line: str | None = None) -> None:
        if not self.enabled:
            return
        record = {k: v for k, v in record.items() if v is not None}
        if "split" in record:  # a mix logs its corpora, then their mean: the mean stays
            self.evaluations[record["split"]] = record
        with open_append(self.path) as f:  # never through a link planted in the run directory
            f.write(json.dumps({**record, **self.run, "time": time.time()}) + "\n")
        if line:
            log.info(line)
        if self.wandb is not None:
            try:
                self.wandb.log(
                    {
                        wandb_prefix(record) + k: v
                        for k, v in record.items()
                        if k not in ("step", "split", "corpus", "event")
                    },
                    step=record["step"],
                )
            except Exception as err:  # noqa: BLE001
                self._wandb_failed(err)

    def close(self) -> None:
        if self.wandb is not None:
            try:
                self.wandb.finish()
            except Exception as err:  # noqa: BLE001
                self._wandb_failed(err)


def wandb_prefix(record: dict[str, Any]) -> str:
    """train/, SPLIT/, or SPLIT/CORPUS/ for one corpus of a mix; EVENT/ for an event's record
    (a straggler named)."""
    if "event" in record:
        return f"{record['event']}/"
    if "split" not in record:
        return "train/"
    return "".join(f"{record[k]}/" for k in ("split", "corpus") if k in record)


def train_line(r: dict[str, Any]) -> str:
    parts = [
        f"step {r['step']:>7}",
        f"loss {r['loss']:.4f}",
        format_score(r, width=9),
        f"lr {r['lr']:.3e}",
    ]
    if r.get("grad_norm") is not None:
        parts.append(f"gnorm {r['grad_norm']:.3f}")
    if r.get("loss_scale") is not None:
        parts.append(f"scale {r['loss_scale']:g}")
    parts += [
        f"tok/s {r['tokens_per_s']:9.0f}",
        f"seen/rank {r['tokens_seen']:,}",  # rank 0's tokens; the mix's counts are all ranks
        f"step {r['step_time_s'] * 1000:7.1f}ms",
        f"data {r['data_wait_s'] * 1000:6.1f}ms",
    ]
    if r.get("mfu") is not None:
        parts.append(f"mfu {100 * r['mfu']:5.1f}%")
    parts.append(f"mem {r['memory_gib']:.2f}GiB")
    if r.get("skipped_steps"):
        parts.append(f"skipped {r['skipped_steps']}")
    if r.get("mix_tokens"):
        shares = mix_shares(r["mix_tokens"])
        drawn = (f"{k} {v:,} ({100 * shares[k]:.1f}%)" for k, v in r["mix_tokens"].items())
        parts.append("mix, all ranks: " + " ".join(drawn))
    return " | ".join(parts)


class LogWindow:
    """Sums over the training steps since the last log line (evals and saves excluded); the
    loss stays on the device until the line is written."""

    def __init__(self, device: torch.device):
        self.loss_sum = torch.zeros((), device=device)
        self.steps, self.tokens, self.data_wait, self.seconds = 0, 0, 0.0, 0.0

    def add(self, loss: torch.Tensor, tokens: int, data_wait: float, seconds: float) -> None:
        self.loss_sum += loss
        self.steps += 1
        self.tokens += tokens
        self.data_wait += data_wait
        self.seconds += seconds

    def mean_loss(self, world_size: int) -> float:
        """The loss averaged over the window's steps and all ranks (a collective)."""
        total = self.loss_sum.clone()
        if dist.is_initialized():
            dist.all_reduce(total)
        return total.item() / (self.steps * world_size)


def mix_shares(mix_tokens: dict[str, int] | None) -> dict[str, float] | None:
    """Each corpus's share of the tokens all ranks drew from a mix (None without one)."""
    if not mix_tokens:
        return None
    total = sum(mix_tokens.values())
    return {name: tokens / total if total else 0.0 for name, tokens in mix_tokens.items()}
