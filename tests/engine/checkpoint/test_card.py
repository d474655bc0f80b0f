"""The README an export carries: what it says of the run, and text from a received checkpoint
shown as text, without local paths or secrets."""

from __future__ import annotations

from html import escape
from types import SimpleNamespace

import pytest

from txl_dist.engine.checkpoint.card import card_text, data_line, shared_text


def test_the_readme_names_subword_data_subword_level():
    """Manifests call subword data word-level (both score in perplexity); the README says
    which it was."""
    data = SimpleNamespace(mix=None, dataset="jsonl", root="runs/data/own")
    ckpt = SimpleNamespace(
        config=SimpleNamespace(data=data, model=SimpleNamespace(n_token=2000)),
        point=SimpleNamespace(client=SimpleNamespace(level="word", vocab_sha256="ab" * 32)),
    )
    assert "- data: jsonl (subword level) at runs/data/own, the subword tokenizer" in (
        data_line(ckpt, subword=True)
    )
    assert "- data: jsonl (word level) at runs/data/own, a vocabulary of 2000" in (
        data_line(ckpt, subword=False)
    )


HOSTILE = {
    "run_id": '<script>alert(1)</script><img src=x onerror="alert(2)">',
    "init_from": "[weights](javascript:alert(3)) <javascript:alert(4)> `x` **y**\n# Owned",
}
"""What a received checkpoint's txl.json may say where the README quotes it."""


def assert_renders_as_text(readme: str) -> None:
    """The README, rendered as a hub renders a model card (raw HTML passed through), has no
    tag, link, emphasis or heading of txl.json's: each HOSTILE value shows as its text (a line
    break as \\n)."""
    html = pytest.importorskip("markdown_it").MarkdownIt("commonmark").render(readme)
    for made in ("<script", "<img", "<a ", "href=", "<code>x", "<strong>y", "<h1>Owned"):
        assert made not in html
    for value in HOSTILE.values():
        shown = escape(value.replace("\n", "\\n"), quote=False).replace('"', "&quot;")
        assert shown in html


def test_text_from_a_received_checkpoint_reads_as_text_in_the_readme():
    lines = [f"- {key}: {card_text(value)} (train.{key})" for key, value in HOSTILE.items()]
    assert_renders_as_text("\n".join(lines) + "\n")
    assert all("\n" not in card_text(v) + shared_text(v) for v in HOSTILE.values())


def test_the_readme_shares_no_local_path_and_no_secret():
    note = "checkpoint /home/me/runs/tiny/checkpoints/global_step5 (run r1, step 5)"
    assert card_text(note) == "checkpoint \u2026/global\\_step5 \\(run r1, step 5\\)"
    assert shared_text("file:///srv/data/wt103/") == "\u2026/wt103"
    assert shared_text("~/corpora/own") == "\u2026/own"
    assert shared_text("runs/data/own") == "runs/data/own"  # relative: the project's own
    assert shared_text("s3://bucket/data/own?token=abc") == "s3://bucket/data/own?token=***"
