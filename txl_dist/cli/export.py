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
import sys

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
from txl_dist.checkpoint_names import CLIENT_FILE
from txl_dist.cli import USAGE_ERROR, interruptible
from txl_dist.engine.checkpoint.card import readme
from txl_dist.engine.checkpoint.consolidate import (
    Checkpoint,
    ExportError,
    build_model,
    consolidated_weights,
    open_checkpoint,
)
from txl_dist.evaluation.scores import reported_level
from txl_dist.exports.loading import DATA_FILE, DTYPES, EOS_KEY, tokenizer_record
from txl_dist.hf import export as hf_export
from txl_dist.model.pretrained import VOCAB_FILE

README_FILE = "README.md"


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
