"""txl-export: a DeepSpeed checkpoint (ZeRO 0-3, any world size) -> a plain PyTorch model directory.

    txl-export CKPT_DIR OUT_DIR [--dtype fp32|bf16|fp16] [--format safetensors|torch] [--vocab FILE]
    python -m txl_dist.cli.export CKPT_DIR OUT_DIR ...

CKPT_DIR is a run directory (its latest checkpoint), its checkpoints/ directory (latest) or one
checkpoints/global_stepN. OUT_DIR receives config.json (the model section), model.safetensors
(or pytorch_model.bin, a plain state_dict), the vocabulary and README.md (how it was trained);
load it with `TransformerXL.from_pretrained(OUT_DIR)`, which needs torch and safetensors only.

The vocabulary is the checkpoint's tokenizer.json (subword data: every checkpoint carries it),
else the vocab.txt of the run's data.path; --vocab names either kind (a *.json file is a
tokenizer) when the checkpoint lacks it and data.path has moved. It is checked against the
sha256 the checkpoint records.

The weights are the fp32 master weights (not the bf16/fp16 copies the engine computed with),
consolidated on the CPU (txl_dist/engine/checkpoint/consolidate.py says how, and in what memory).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import unicodedata

import fsspec

from data_pipeline import (
    TOKENIZER_FILE,
    DataError,
    Subword,
    Vocab,
    parse_options,
    redact_text,
    vocab_url,
)
from data_pipeline.limits import METADATA_BYTES
from data_pipeline.received import received_lines
from txl_dist.cli import USAGE_ERROR, interruptible
from txl_dist.engine.checkpoint.consolidate import (
    Checkpoint,
    ExportError,
    build_model,
    consolidated_weights,
    open_checkpoint,
)
from txl_dist.engine.checkpoint.state import CLIENT_FILE
from txl_dist.evaluation.scores import format_score, reported_level
from txl_dist.exports.loading import DATA_FILE, DTYPES, EOS_KEY, tokenizer_record
from txl_dist.hf import export as hf_export
from txl_dist.logs import ranks
from txl_dist.model.transformer import SAFETENSORS_FILE, TORCH_FILE, VOCAB_FILE

README_FILE = "README.md"
MARKUP = {"&": "&amp;", "<": "&lt;", ">": "&gt;", **{c: "\\" + c for c in "\\`*_[]()!~|{}"}}
"""What text from a received txl.json is written as in the README (a model card: Markdown a hub
renders as HTML), so it reads as text: no tag, link, code span or emphasis of its own."""
LOCAL_PATH = re.compile(r"""(?<![^\s(\[{'"=])(?:file://)?~?/[^\s)\]}'"]*""")
"""An absolute local path (or file:// URL, or ~/) where a path can start: not a URL's path."""


def training_vocab(
    ckpt: Checkpoint, path: str | None, storage_options: dict | None = None
) -> Vocab | Subword:
    """The run's vocabulary (`path`, the checkpoint's tokenizer.json, or data.path's), checked
    against the checkpoint's hash; a tokenizer ends documents with the checkpoint's recorded
    end-of-text token.

    Credentials come from the caller (command line, environment), never from the checkpoint,
    which holds them redacted.
    """
    carried = os.path.join(ckpt.path, TOKENIZER_FILE)
    url = path or (carried if os.path.exists(carried) else _local_vocab_of(ckpt))
    kind = Subword if url.endswith(".json") else Vocab
    try:
        vocab = kind.load(url, storage_options or {}, given=path is not None)  # --vocab's link
    except DataError as err:
        raise ExportError(
            f"vocabulary {redact_text(url)} of the run not found or not readable "
            f"({err}); pass --vocab FILE (and --storage-option KEY=VALUE)"
        ) from err
    expected = ckpt.point.client.vocab_sha256
    if vocab.sha256 != expected or len(vocab) != ckpt.config.model.n_token:
        raise ExportError(
            f"vocabulary {redact_text(url)} ({len(vocab)} tokens, sha256 {vocab.sha256[:12]}) is "
            f"not the one the checkpoint was trained with ({ckpt.config.model.n_token} tokens, "
            f"sha256 {str(expected)[:12]}); pass the right one with --vocab FILE"
        )
    if not isinstance(vocab, Subword):
        return vocab
    try:
        return vocab.ending_with(ckpt.point.client.eos_token, f"{ckpt.path}/{CLIENT_FILE}")
    except DataError as err:
        raise ExportError(str(err)) from err


def _local_vocab_of(ckpt: Checkpoint) -> str:
    """The tokenizer.json (checkpoints from before they carried it) or else the vocab.txt of the
    run's data.path, if that is a local file: a checkpoint may come from anyone, and txl-export
    fetches no URL it names."""
    root = ckpt.config.data.root
    protocol, local_root = fsspec.core.split_protocol(root)
    if protocol not in (None, "file", "local"):
        raise ExportError(
            f"the checkpoint's data.path {redact_text(root)} is remote and "
            "txl-export reads no URL a checkpoint names; pass its vocabulary with --vocab URL"
        )
    tokenizer = os.path.join(local_root, TOKENIZER_FILE)
    return tokenizer if os.path.exists(tokenizer) else vocab_url(root)


def export(
    ckpt_dir: str,
    out_dir: str,
    dtype: str = "fp32",
    format: str = "safetensors",
    vocab_path: str | None = None,
    storage_options: dict | None = None,
) -> Checkpoint:
    """Write OUT_DIR from a checkpoint; returns the checkpoint that was exported."""
    ckpt = open_checkpoint(ckpt_dir)
    # Fail on a bad vocabulary before the slow part.
    vocab = training_vocab(ckpt, vocab_path, storage_options)
    subword = isinstance(vocab, Subword)
    model = build_model(ckpt, consolidated_weights(ckpt), DTYPES[dtype])

    def write_extra(directory: str) -> None:
        vocab.save(os.path.join(directory, TOKENIZER_FILE if subword else VOCAB_FILE))
        level = reported_level(ckpt.point.client.level, subword)  # older checkpoints: word
        data = {"dataset": ckpt.config.data.dataset, "level": level}
        data["evaluation"] = {"rows": ckpt.plan.eval_rows, "dtype": ckpt.plan.precision}
        if subword:  # what loads check the export's tokenizer.json against
            data["tokenizer"] = tokenizer_record(vocab)
        if subword and vocab.eos is not None:  # what generation stops at and starts after
            data[EOS_KEY] = vocab.eos
        with open(os.path.join(directory, DATA_FILE), "w") as f:
            json.dump(data, f)
        with open(os.path.join(directory, README_FILE), "w") as f:
            f.write(readme(ckpt, dtype, format, subword))

    try:  # written beside OUT_DIR and renamed into place: never two exports' files in one
        if format == "hf":
            hf_export.save_hf(model, out_dir, write_extra)
        else:
            model.save_pretrained(out_dir, format=format, write_extra=write_extra)
    except FileExistsError as err:
        raise ExportError(str(err)) from err
    return ckpt


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


@interruptible("txl-export")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="txl-export", description=__doc__.splitlines()[0])
    parser.add_argument(
        "ckpt_dir", help="run dir, its checkpoints/ dir or checkpoints/global_stepN"
    )
    parser.add_argument("out_dir", help="output directory (created)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="weight dtype")
    parser.add_argument(
        "--format", choices=("safetensors", "torch", "hf"), default="safetensors",
        help="hf: a directory transformers loads with trust_remote_code=True (txl_dist.hf)",
    )  # fmt: skip
    parser.add_argument("--vocab", help="vocabulary file when the run's data.path has moved")
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fsspec storage option for reading the vocabulary (credentials are never taken "
        "from the checkpoint); S3 also reads the AWS variables",
    )
    args = parser.parse_args(argv)
    try:
        options = parse_options(args.storage_option)
    except argparse.ArgumentTypeError:
        parser.error("--storage-option must be KEY=VALUE")
    try:
        ckpt = export(args.ckpt_dir, args.out_dir, args.dtype, args.format, args.vocab, options)
    except ExportError as err:
        print(f"txl-export: error: {err}", file=sys.stderr)
        return USAGE_ERROR
    print(f"exported {ckpt.path} (step {ckpt.step}) to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
