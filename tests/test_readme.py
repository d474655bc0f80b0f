"""The README's commands run as written: every ```bash block, top to bottom (issue 16).

Convention: a block whose first line is `# not run here: REASON` needs what a 2-core machine
without a GPU lacks (GPUs, a SLURM cluster, several nodes, internet, an S3 bucket) or is the
test suite itself; every other ```bash block is runnable and must exit 0.

Each runnable block runs in a fresh `bash -euo pipefail`, in README order, in a temporary
directory laid out like a checkout: links to the repository's launch/, configs/ and bench/, and
to the environment under test as .venv, with ../shared/data/wikitext-103 holding the shared
train prefix (a link) and the first VALID_BYTES of valid, so evaluations take seconds. Nothing
of the test's own environment is on PATH: the blocks after the README's `source
.venv/bin/activate` block start with that line, as the README asks of every new shell. What the
test changes, and nothing else:
- TXL_SET (the README's documented overrides from the environment) cuts every training run to
  a few steps;
- `bash launch/install.sh` runs as `true`: CI has just run it on this checkout, and in the
  temporary layout it would re-point the environment's editable install there.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import processes
from tests.conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
NOT_RUN = re.compile(r"# not run here: \S")
ACTIVATE = "source .venv/bin/activate"
INSTALL = "bash launch/install.sh"
TXL_SET = "train.max_steps=2 logging.log_interval=1"  # every training run: 2 steps, both logged
VALID_BYTES = 10_000  # of the 1.1 MB valid split: ~2,000 tokens, evaluations of seconds
BLOCK_TIMEOUT_S = 300
FENCE = re.compile(r"^( *)```(\S*)\s*$")
# The runs the README trains, each with its own train.out_dir.
TRAINED = ["tiny", "tiny-deepspeed", "tiny-torchrun", "tiny-python", "tiny-300"]


@dataclasses.dataclass
class Block:
    """One ```bash block of a Markdown file."""

    line: int  # line of its opening fence, 1-based
    text: str  # its lines, without the fences and the fence's indentation

    @property
    def runnable(self) -> bool:
        return not NOT_RUN.match(self.text)


def bash_blocks(markdown: str) -> list[Block]:
    """The ```bash blocks in order; fences may be indented (inside a list item)."""
    lines, blocks, i = markdown.splitlines(), [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        indent, language = fence.groups()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        if language == "bash":
            body = [line.removeprefix(indent) for line in lines[i + 1 : end]]
            blocks.append(Block(i + 1, "\n".join(body) + "\n"))
        i = end + 1
    return blocks


def test_blocks_are_extracted_and_classified():
    markdown = "\n".join(
        [
            "```bash", "echo one", "```",
            "```", "not a command", "```",
            "- item:",
            "  ```bash", "  # not run here: needs a SLURM cluster", "  sbatch x", "  ```",
            "```python", "print(1)", "```",
        ]
    )  # fmt: skip
    blocks = bash_blocks(markdown)
    assert [(b.line, b.text, b.runnable) for b in blocks] == [
        (1, "echo one\n", True),
        (8, "# not run here: needs a SLURM cluster\nsbatch x\n", False),
    ]
    assert Block(1, "# not run here:\nx\n").runnable  # a mark without a reason is no mark


def test_readme_marks_what_cannot_run_here_and_runnable_blocks_hold_no_placeholders():
    blocks = bash_blocks(README.read_text())
    reasons = [b.text.splitlines()[0].removeprefix("# not run here: ") for b in blocks]
    runnable = [b for b in blocks if b.runnable]
    assert [r for b, r in zip(blocks, reasons) if not b.runnable] == [
        "the test suite itself, which runs this README (tests/test_readme.py)",
        "needs internet (the official archive) and an S3 bucket",
        "needs a SLURM cluster",
        "needs GPUs",
        "needs a SLURM cluster",
        "needs a SLURM cluster",
        "needs several nodes",
    ]
    assert len(runnable) == 8
    assert INSTALL in runnable[0].text and runnable[1].text.strip() == ACTIVATE
    for block in runnable:
        assert "..." not in block.text, (
            f"README.md line {block.line}: a placeholder in\n{block.text}"
        )


def checkout_layout(root: Path, shared_data: Path) -> Path:
    """A checkout in root/checkout whose ../shared/data/wikitext-103 has a short valid split."""
    source = root / "shared" / "data" / "wikitext-103"
    source.mkdir(parents=True)
    (source / "wiki.train.tokens").symlink_to(shared_data / "wikitext-103" / "wiki.train.tokens")
    with open(shared_data / "wikitext-103" / "wiki.valid.tokens", encoding="utf-8") as f:
        lines = []
        while sum(map(len, lines)) < VALID_BYTES:
            lines.append(f.readline())
    (source / "wiki.valid.tokens").write_text("".join(lines), encoding="utf-8")
    checkout = root / "checkout"
    checkout.mkdir()
    for name in ("launch", "configs", "bench"):
        (checkout / name).symlink_to(REPO_ROOT / name)
    (checkout / ".venv").symlink_to(sys.prefix)
    return checkout


def fresh_shell_env() -> dict[str, str]:
    """The environment of a new terminal: no virtual environment, no TXL_* or wandb key."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("VIRTUAL_ENV", "WANDB_API_KEY") and not key.startswith("TXL_")
    }
    venv_bin = Path(sys.prefix, "bin").resolve()
    paths = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(p for p in paths if p and Path(p).resolve() != venv_bin)
    # DeepSpeed's JIT-built CPU op: one cache per environment (as tests/integration/conftest.py)
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))
    env["TXL_SET"] = TXL_SET
    return env


@pytest.mark.slow
def test_readme_commands_run_as_written(shared_data, tmp_path):
    if not Path(sys.prefix, "bin", "activate").exists():
        pytest.fail(f"{sys.prefix} is not a virtual environment: run bash launch/install.sh")
    checkout, env = checkout_layout(tmp_path, shared_data), fresh_shell_env()
    activated, times = False, []
    for block in bash_blocks(README.read_text()):
        if not block.runnable:
            continue
        script = (ACTIVATE + "\n" if activated else "") + block.text.replace(INSTALL, "true")
        start = time.monotonic()
        try:
            result = processes.run(
                ["bash", "-euo", "pipefail", "-c", script],
                timeout=BLOCK_TIMEOUT_S, cwd=checkout, env=env, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.fail(f"README.md line {block.line}: over {BLOCK_TIMEOUT_S} s:\n{script}")
        times.append(f"line {block.line}: {time.monotonic() - start:.0f} s")
        assert result.returncode == 0, (
            f"README.md line {block.line}: exit {result.returncode}\n{script}\n"
            f"--- stdout (end) ---\n{result.stdout[-4000:]}\n--- stderr (end) ---\n"
            f"{result.stderr[-4000:]}"
        )
        activated = activated or block.text.strip() == ACTIVATE
    print("README blocks:", ", ".join(times))
    # TXL_SET reached every training command (else each would have trained its full length).
    for run in TRAINED:
        latest = checkout / "runs" / run / "checkpoints" / "latest"
        assert latest.read_text().strip() == "global_step2", run
