"""The README an export carries (a model card): how its checkpoint's run trained and was
evaluated, and how to use it. Text from the checkpoint or its run may come from anyone: it is
written escaped, secrets redacted and local paths by their last part."""

from __future__ import annotations

import json
import os
import re
import unicodedata

from data_pipeline import TOKENIZER_FILE, DataError, redact_text
from data_pipeline.limits import METADATA_BYTES
from data_pipeline.received import received_lines
from txl_dist.engine.checkpoint.consolidate import Checkpoint, ExportError
from txl_dist.evaluation.scores import format_score, reported_level
from txl_dist.hf import export as hf_export
from txl_dist.logs import ranks
from txl_dist.model.pretrained import SAFETENSORS_FILE, TORCH_FILE

MARKUP = {"&": "&amp;", "<": "&lt;", ">": "&gt;", **{c: "\\" + c for c in "\\`*_[]()!~|{}"}}
"""What text from a received txl.json is written as in the README (a model card: Markdown a hub
renders as HTML), so it reads as text: no tag, link, code span or emphasis of its own."""
LOCAL_PATH = re.compile(r"""(?<![^\s(\[{'"=])(?:file://)?~?/[^\s)\]}'"]*""")
"""An absolute local path (or file:// URL, or ~/) where a path can start: not a URL's path."""


def eval_records(ckpt: Checkpoint) -> list[dict]:
    """The run's evaluation rows logged at the checkpoint's step (empty if none were kept)."""
    path = os.path.join(ckpt.run_dir, "metrics.jsonl")
    if not os.path.lexists(path):
        return []
    try:  # one row at a time: only the rows of the step are kept
        rows = (json.loads(line) for line in received_lines(path, METADATA_BYTES, "metrics log"))
        return [r for r in rows if "split" in r and r.get("step") == ckpt.step]
    except (DataError, ValueError) as err:
        raise ExportError(str(err)) from err


def eval_line(row: dict, mixed: bool) -> str:
    """One evaluation row of the README; of a mix, each corpus's by name, then their mean."""
    name = card_text(row["split"])
    if "corpus" in row:
        name += f" {card_text(row['corpus'])}"
    elif mixed:
        name += " (the corpora's token-weighted mean)"
    return (
        f"- {name}: loss {row['loss']:.4f}, {format_score(row, digits=3)} "
        f"({card_text(row.get('tokens', '?'))} tokens)"
    )


def card_text(value: object) -> str:
    """`value`, text from the checkpoint or its run (it may come from anyone), as README text
    (shared_text) with its Markdown and HTML escaped: it reads as text, never as markup."""
    return "".join(MARKUP.get(c, c) for c in shared_text(value))


def shared_text(value: object) -> str:
    """`value` as the README may show it, in a code block too: secrets redacted, an absolute
    local path by its last part (the README is shared; where the files lay on the training
    machine is not its business), control characters escaped so that it stays on its line."""
    text = LOCAL_PATH.sub(shared_path, redact_text(str(value)))
    return "".join(
        ascii(c)[1:-1] if unicodedata.category(c)[0] in "CZ" and c != " " else c for c in text
    )


def shared_path(match: re.Match) -> str:
    """An absolute local path or file:// URL (LOCAL_PATH) by its last part after an ellipsis."""
    name = os.path.basename(match.group(0).rstrip("/"))
    return f"\u2026/{name}" if name else match.group(0)


def data_line(ckpt: Checkpoint, subword: bool) -> str:
    """What the run trained on: its data (each corpus of a mix) and its vocabulary."""
    cfg, client = ckpt.config, ckpt.point.client
    if cfg.data.mix is None:
        level = reported_level(client.level, subword)
        data = f"{card_text(cfg.data.dataset)} ({level} level) at {card_text(cfg.data.root)}"
    else:
        data = "a mix of " + ", ".join(
            f"{card_text(c.name)} (weight {c.weight}) at {card_text(c.path)}" for c in cfg.data.mix
        )
    vocabulary = f"the subword tokenizer {TOKENIZER_FILE}" if subword else "a vocabulary"
    tokens = f"{cfg.model.n_token} tokens (sha256 {card_text(client.vocab_sha256)})"
    return f"- data: {data}, {vocabulary} of {tokens}"


def init_line(ckpt: Checkpoint) -> list[str]:
    """Where the run's first weights came from (train.init_from), if not from its seed."""
    note = ckpt.point.client.init_from or ckpt.config.train.init_from
    if note is None:
        return []
    return [
        f"- initialized from: {card_text(note)} (train.init_from), with a fresh optimizer, "
        "schedule and data position"
    ]


def readme(ckpt: Checkpoint, dtype: str, format: str, subword: bool = False) -> str:
    """A short account of how the exported model was trained and evaluated."""
    cfg, client, precision = ckpt.config, ckpt.point.client, ckpt.plan.precision
    ev = cfg.model.for_eval()
    rows = ckpt.plan.eval_rows
    mixed = cfg.data.mix is not None
    evals = [eval_line(r, mixed) for r in eval_records(ckpt)] or ["- none recorded at this step"]
    weights = TORCH_FILE if format == "torch" else SAFETENSORS_FILE
    # in a code block below: Markdown is not read there
    data_path, split = shared_text(cfg.data.root), shared_text(cfg.data.valid_split)
    return "\n".join(
        [
            "# Transformer-XL exported by txl-export",
            "",
            f"- checkpoint: {card_text(os.path.basename(ckpt.path))} (run "
            f"{card_text(client.run_id)}), step {ckpt.step} of {cfg.train.max_steps}",
            f"- training: ZeRO stage {cfg.zero_stage} on {ranks(client.world_size)}, "
            f"{precision}, {cfg.train.global_rows} global rows x tgt_len {cfg.model.tgt_len}, "
            f"mem_len {cfg.model.mem_len}, optimizer {card_text(cfg.optim.name)} "
            f"(lr {cfg.optim.lr})",
            data_line(ckpt, subword),
            *init_line(ckpt),
            f"- weights: {weights}, {dtype} (from the fp32 master weights)",
            "",
            f"## Evaluation by the training engine at step {ckpt.step}",
            "",
            f"Settings: {precision}, {rows} rows, tgt_len {ev.tgt_len}, mem_len {ev.mem_len}, "
            f"clamp_len {ev.clamp_len}, same_length {ev.same_length}.",
            "",
            *evals,
            "",
            "## Use",
            "",
            *(
                hf_export.USAGE
                if format == "hf"
                else [
                    "```",
                    "from txl_dist.model import TransformerXL",
                    "model = TransformerXL.from_pretrained(DIR)",
                    f"txl-eval --model DIR --data {data_path} --split {split} "
                    f"--batch-size {rows} --dtype {precision}   # the engine's evaluation",
                    'txl-generate --model DIR --prompt "The" --max-tokens 50',
                    "```",
                ]
            ),
            "",
        ]
    )
