"""The documentation's commands run as written: every ```bash block of the README and of docs/.

Convention: a block whose first line is `# not run here: REASON` needs what a 2-core machine
without a GPU lacks (GPUs, a SLURM cluster, several nodes, internet, an S3 bucket); every other
```bash block is runnable and must exit 0. The test suite's own command is a ```sh block.

Each runnable block runs in a fresh `bash -euo pipefail`, the README's first, then each docs page's
in the order the README links them (a page may use what an earlier one made), in a temporary
directory laid out like a checkout. The README's Commands table runs too, top to bottom, in a
second such checkout holding what the README's blocks made (the Quick start's runs/): each row's
example whose page runs it, so a row reads only what the Quick start or an earlier row made.
The pages of SIDE_PAGES, which read only what the README's blocks made, run in a third such
checkout. The three run side by side (most blocks are one process on one core).
A checkout has links to the repository's launch/, configs/ and bench/, and to the environment
under test as .venv, with ../shared/data/wikitext-103 holding the shared train prefix (a link)
and the first VALID_BYTES of valid, so evaluations take seconds. Nothing of the test's own
environment is on PATH: the blocks after the README's `source
.venv/bin/activate` block start with that line, as the README asks of every new shell. What the
test changes, and nothing else:
- TXL_SET (the documented overrides from the environment) cuts every training run to a few
  steps; in the docs pages' blocks it also sets wandb to disabled (its backend's start costs
  seconds a run), while the README's runs keep wandb offline, so the clean-checkout check
  still covers the files wandb writes;
- `bash launch/install.sh` runs as `true`: CI has just run it on this checkout, and in the
  temporary layout it would re-point the environment's editable install there.
Afterwards `git status` of the temporary checkouts (with the repository's .gitignore) and of
the repository shows nothing new: the blocks write only under runs/.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests import processes
from tests.conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
DOCS_LINK = re.compile(r"\]\(docs/([\w.-]+\.md)")  # [text](docs/page.md...)
DOCS_LIST = "## Documentation"  # the README's section that links every docs page
README_MAX_LINES = 199  # what it is, Quick start, a command table, the configs, links: no more
NOT_RUN = re.compile(r"# not run here: \S")
ACTIVATE = "source .venv/bin/activate"
INSTALL = "bash launch/install.sh"
TXL_SET = "train.max_steps=2 logging.log_interval=1"  # every training run: 2 steps, both logged
DOCS_TXL_SET = f"{TXL_SET} logging.wandb.mode=disabled"  # the README's runs cover wandb offline
VALID_BYTES = 10_000  # of the 1.1 MB valid split: ~2,000 tokens, evaluations of seconds
BLOCK_TIMEOUT_S = 300
FENCE = re.compile(r"^( *)```(\S*)\s*$")
# What a machine without a GPU lacks: a block may be left unrun for one of these only.
LACKS = ("GPU", "SLURM cluster", "several nodes", "internet", "S3 bucket")
# The runs the pages train, each with its own train.out_dir: the README's, then the docs'.
README_TRAINED = ["sample", "tiny"]
TRAINED = [*README_TRAINED, "tiny-deepspeed", "tiny-torchrun", "tiny-python", "tiny-300"]
# Pages that read only what the README's blocks made, nor does a later page read what they make.
SIDE_PAGES = ("data.md", "own-corpora.md")


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


def documentation_list(readme: Path = README) -> list[str]:
    """The docs pages the README's documentation section links, in its order."""
    section = readme.read_text().partition(DOCS_LIST)[2].partition("\n## ")[0]
    return DOCS_LINK.findall(section)


def pages(readme: Path = README, docs: Path = DOCS) -> list[Path]:
    """The README, then docs/*.md in the order of its documentation section, then any other."""
    linked = [docs / name for name in documentation_list(readme)]
    ordered = [readme, *dict.fromkeys(page for page in linked if page.exists())]
    return ordered + sorted(set(docs.glob("*.md")) - set(ordered))


def where(page: Path, block: Block) -> str:
    return f"{page.relative_to(REPO_ROOT)} line {block.line}"


def test_pages_are_the_readme_then_docs_in_the_readmes_link_order(tmp_path):
    (tmp_path / "docs").mkdir()
    for name in ("a.md", "b.md", "c.md"):
        (tmp_path / "docs" / name).write_text("")
    readme = tmp_path / "README.md"
    readme.write_text(
        "[C](docs/c.md)\n## Documentation\n[B](docs/b.md#x) [gone](docs/gone.md) [A](docs/a.md)"
        " [B](docs/b.md)\n## Next\n[C](docs/c.md)"
    )
    found = [p.relative_to(tmp_path).as_posix() for p in pages(readme, tmp_path / "docs")]
    assert found == ["README.md", "docs/b.md", "docs/a.md", "docs/c.md"]


def test_readme_fits_on_a_screen():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, over {README_MAX_LINES}: move the details to a docs/ page"
    )


def test_every_docs_page_is_linked_from_the_readme():
    linked = set(documentation_list())
    unlinked = sorted(page.name for page in DOCS.glob("*.md") if page.name not in linked)
    assert not unlinked, f"README.md's {DOCS_LIST} section lacks a link to {unlinked}"


def test_blocks_are_marked_only_for_what_a_cpu_box_lacks_and_hold_no_placeholders():
    for page in pages():
        for block in bash_blocks(page.read_text()):
            if block.runnable:
                assert "..." not in block.text, (
                    f"{where(page, block)}: a placeholder in\n{block.text}"
                )
                continue
            reason = block.text.splitlines()[0].removeprefix("# not run here: ")
            assert any(lack in reason for lack in LACKS), (
                f"{where(page, block)}: '{reason}' is none of {LACKS}: run the block, or name "
                "what this machine lacks"
            )
    runnable = [b for b in bash_blocks(README.read_text()) if b.runnable]
    assert INSTALL in runnable[0].text and runnable[1].text.strip() == ACTIVATE


def one_line_commands(blocks: list[Block]) -> str:
    """The blocks' commands, continuation lines joined, runs of spaces made one."""
    text = "\n".join(block.text for block in blocks).replace("\\\n", " ")
    return re.sub(r"[ \t]+", " ", text)


def table_rows(readme: Path = README) -> list[tuple[str, str]]:
    """(docs page, example) of each row of the README's Commands table, in order."""
    section = readme.read_text().partition("## Commands")[2].partition("\n## ")[0]
    return re.findall(r"^\| \[[^]]*\]\(docs/([\w.-]+\.md)[^)]*\)[^|]*\| `(.+)` \|$", section, re.M)


def runnable_examples(readme: Path = README, docs: Path = DOCS) -> list[str]:
    """The Commands table's examples, in order, that a runnable block of their page holds."""
    return [
        example
        for page, example in table_rows(readme)
        if example
        in one_line_commands([b for b in bash_blocks((docs / page).read_text()) if b.runnable])
    ]


def test_readme_command_examples_run_in_the_pages_they_link():
    rows = table_rows()
    assert len(rows) >= 8, f"README.md's Commands table: {len(rows)} examples found"
    for page, example in rows:
        assert example in one_line_commands(bash_blocks((DOCS / page).read_text())), (
            f"README.md's example `{example}` is in no ```bash block of docs/{page}"
        )


def test_the_table_runs_all_but_what_a_cpu_box_lacks(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "```bash\nrun one\n```\n```bash\n# not run here: needs GPUs\non a gpu\n```\n"
    )
    readme = tmp_path / "README.md"
    readme.write_text(
        "## Commands\n| [`x`](docs/a.md): x | `run one` |\n| [`y`](docs/a.md#z): y | `on a gpu` |\n"
    )
    assert runnable_examples(readme, tmp_path / "docs") == ["run one"]
    # Those of this README: the table, but for a GPU's training and SLURM.
    assert len(runnable_examples()) == len(table_rows()) - 2


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


def git_status(directory: Path) -> set[str]:
    """`git status --porcelain` of directory's repository: one entry per changed or new path."""
    result = processes.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], timeout=60, cwd=directory
    )
    assert result.returncode == 0, result.stderr
    return set(result.stdout.splitlines())


def as_a_repository(checkout: Path) -> None:
    """Make checkout a git repository that ignores what the project's .gitignore does."""
    (checkout / ".gitignore").write_text((REPO_ROOT / ".gitignore").read_text())
    result = processes.run(["git", "init", "--quiet"], timeout=60, cwd=checkout)
    assert result.returncode == 0, result.stderr


def run_block(directory: Path, env: dict, script: str, where: str) -> str:
    """Run a block's script in a fresh bash in directory (failing the test unless it exits 0);
    returns how long it took."""
    start = time.monotonic()
    try:
        result = processes.run(
            ["bash", "-euo", "pipefail", "-c", script],
            timeout=BLOCK_TIMEOUT_S, cwd=directory, env=env, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"{where}: over {BLOCK_TIMEOUT_S} s:\n{script}")
    assert result.returncode == 0, (
        f"{where}: exit {result.returncode}\n{script}\n"
        f"--- stdout (end) ---\n{result.stdout[-4000:]}\n--- stderr (end) ---\n"
        f"{result.stderr[-4000:]}"
    )
    return f"{where}: {time.monotonic() - start:.0f} s"


def run_table(table: Path, env: dict) -> list[str]:
    """The README's Commands table's runnable examples, top to bottom, in `table`."""
    times = []
    for example in runnable_examples():
        where_ = f"README.md's Commands table, `{example}`"
        times.append(run_block(table, env, f"{ACTIVATE}\n{example}\n", where_))
    return times


def run_pages(directory: Path, env: dict, in_order: list[Path], activated: bool) -> list[str]:
    """The runnable blocks of the pages in_order, in `directory`; once `activated` (by the
    README's `source .venv/bin/activate` block), each block starts with that line."""
    times = []
    for page in in_order:
        env["TXL_SET"] = TXL_SET if page == README else DOCS_TXL_SET
        for block in bash_blocks(page.read_text()):
            if not block.runnable:
                continue
            script = block.text.replace(INSTALL, "true")
            script = f"{ACTIVATE}\n{script}" if activated else script
            times.append(run_block(directory, env, script, where(page, block)))
            activated = activated or block.text.strip() == ACTIVATE
    return times


@pytest.mark.slow
def test_documented_commands_run_as_written_and_leave_the_checkout_clean(shared_data, tmp_path):
    if not Path(sys.prefix, "bin", "activate").exists():
        pytest.fail(f"{sys.prefix} is not a virtual environment: run bash launch/install.sh")
    checkout, env = checkout_layout(tmp_path, shared_data), fresh_shell_env()
    table = checkout_layout(tmp_path / "table", shared_data)
    side = checkout_layout(tmp_path / "side", shared_data)
    for repository in (checkout, table, side):
        as_a_repository(repository)
    before = {path: git_status(path) for path in (checkout, table, side, REPO_ROOT)}
    times = run_pages(checkout, env, [README], activated=False)
    for copy in (table, side):  # what the Quick start made
        shutil.copytree(checkout / "runs", copy / "runs", symlinks=True)
    docs = pages()[1:]
    side_pages = [page for page in docs if page.name in SIDE_PAGES]
    assert len(side_pages) == len(SIDE_PAGES), side_pages
    with ThreadPoolExecutor(2) as beside:
        lanes = [
            beside.submit(run_table, table, dict(env)),
            beside.submit(run_pages, side, dict(env), side_pages, True),
        ]
        times += run_pages(checkout, env, [p for p in docs if p not in side_pages], True)
        for lane in lanes:
            times += lane.result()
    print("blocks:", ", ".join(times))
    # TXL_SET reached every training command (else each would have trained its full length).
    for run in TRAINED:
        latest = checkout / "runs" / run / "checkpoints" / "latest"
        assert latest.read_text().strip() == "global_step2", run
        wandb_runs = list((checkout / "runs" / run / "wandb").glob("offline-run-*/run-*.wandb"))
        assert len(wandb_runs) == (run in README_TRAINED), (run, wandb_runs)
    left = {str(path): sorted(git_status(path) - status) for path, status in before.items()}
    assert not any(left.values()), f"the blocks left what git sees (write under runs/): {left}"
