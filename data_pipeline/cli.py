"""txl-prepare: corpus -> vocabulary + document-contiguous shards + manifests (prepare.py).

    txl-prepare --dataset wikitext-103 --source ../shared/data/wikitext-103 --out DIR
    txl-prepare --dataset lm1b --vocab 1b_word_vocab.txt --out s3://bucket/lm1b --workers 8
    txl-prepare --verify DIR

On a cluster the same steps run as jobs (launch/slurm/prepare.sbatch):

    txl-prepare ... --part I/N     # units of part I of N: count, or (vocabulary ready) encode
    txl-prepare ... --merge        # build the vocabulary, or (units encoded) write manifests

Remote ``--out`` / ``--source``: options for fsspec go in ``--out-option KEY=VALUE`` and
``--source-option KEY=VALUE`` (e.g. ``--out-option endpoint_url=http://127.0.0.1:9000``).
s3fs also honours the standard AWS variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ENDPOINT_URL``), and fsspec reads ``FSSPEC_S3_ENDPOINT_URL``-style variables at import.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import fields

from data_pipeline.corpora.datasets import DATASETS
from data_pipeline.prepare.job import Job
from data_pipeline.prepare.settings import Settings
from data_pipeline.prepare.units import parse_part
from data_pipeline.prepare.verify import verify
from data_pipeline.redact import redact_text
from data_pipeline.shards.errors import DataError
from data_pipeline.shards.format import Manifest, manifest_url
from data_pipeline.shards.storage import parse_options


def parser() -> argparse.ArgumentParser:
    """The txl-prepare command line. An option of a run is the ``Settings`` field of its name,
    whose default applies when it is not given (so options default to None here)."""
    p = argparse.ArgumentParser(prog="txl-prepare", description=__doc__.split("\n")[0])
    for add in (_corpus_options, _tokenizer_options, _layout_options, _job_options):
        add(p)
    return p


def _corpus_options(p: argparse.ArgumentParser) -> None:
    """What is read and where it is written."""
    p.add_argument("--dataset", choices=DATASETS)
    p.add_argument(
        "--source", help="directory, file or archive (any fsspec URL); default: official"
    )
    p.add_argument("--out", help="output root (any fsspec URL)")
    p.add_argument("--source-checksum", help="ALGO:HEX of a --source archive")
    p.add_argument("--cache-dir", help="where archives are downloaded")
    p.add_argument("--out-option", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE")


def _tokenizer_options(p: argparse.ArgumentParser) -> None:
    """How documents become ids: a vocabulary, a tokenizer, the records' text."""
    p.add_argument("--vocab", help="reuse this vocabulary file (token[ count] per line)")
    p.add_argument(
        "--tokenizer", metavar="FILE|bpe:N",
        help="jsonl/parquet: a tokenizer.json (any fsspec URL), or bpe:N to train a byte-level "
        "BPE of N tokens on the train split",
    )  # fmt: skip
    p.add_argument(
        "--eos-token", metavar="TEXT",
        help="--tokenizer FILE: its token written after every document (default: its own "
        "end-of-text token, <|endoftext|>, <|end_of_text|>, </s> or <eos>)",
    )  # fmt: skip
    p.add_argument(
        "--bpe-sample-bytes", type=int,
        help="bpe:N: train on this many bytes of the train split, whole 4 MiB pieces spread evenly "
        "over it, so memory stays flat in corpus size (default: 256 MiB; the manifest says it)",
    )  # fmt: skip
    p.add_argument("--text-field", help="jsonl/parquet: the field of the text")
    p.add_argument(
        "--skip-bad-records", action="store_true",
        help="jsonl/parquet: leave out malformed records (counted in the log) instead of stopping",
    )  # fmt: skip


def _layout_options(p: argparse.ArgumentParser) -> None:
    """How the prepared data is cut (shards, samples, units) and by how many workers."""
    p.add_argument("--shard-size", type=int, help="tokens/shard")
    p.add_argument("--sample-size", type=int, help="tokens/sample")
    p.add_argument(
        "--unit-bytes",
        type=int,
        help="source bytes per unit (the grain of --part; shards never span units)",
    )
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--min-count", type=int, help="vocabulary min count (default per dataset)")
    p.add_argument("--text-docs", choices=("block", "file"))
    p.add_argument(
        "--test-chars", type=int,
        help="enwik8/text8: bytes of test and of valid (the reference's 5,000,000)",
    )  # fmt: skip


def _job_options(p: argparse.ArgumentParser) -> None:
    """Which step runs, and how it reports."""
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a corpus prepared at --out with another vocabulary or tokenizer",
    )
    p.add_argument("--part", metavar="I/N", help="do part I of N of the next step and exit")
    p.add_argument("--merge", action="store_true", help="join the parts' results and exit")
    p.add_argument("--verify", metavar="URL", help="re-check a prepared dataset root and exit")


INTERRUPTED_LINE = "txl-prepare: interrupted; the same command goes on from the units it finished"


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``txl-prepare``; returns the exit status."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    args = parser().parse_args(argv)
    try:
        out_options = parse_options(args.out_option)
        source_options = parse_options(args.source_option)
    except argparse.ArgumentTypeError as err:
        parser().error(f"--out-option / --source-option: {err}")
    try:
        if args.verify:
            for line in verify(args.verify, out_options):
                print(redact_text(line))
            return 0
        if not (args.dataset and args.out):
            parser().error("--dataset and --out are required (or --verify URL)")
        if args.part and args.merge:
            parser().error("--part and --merge are separate jobs: give one of them")
        try:
            settings = settings_of(args, out_options, source_options)
            part = parse_part(args.part) if args.part else None
        except ValueError as err:
            parser().error(str(err))
        job = Job.open(settings)
        if part:
            print(f"part {part[0] + 1}/{part[1]}: {job.run_part(*part)}")
            return 0
        manifests = job.merge() if args.merge else job.run()
    except DataError as err:  # input errors exit 2, like usage errors and txl-pretrain's
        print(f"txl-prepare: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # 128 + SIGINT, as a shell reports it
        print(INTERRUPTED_LINE, file=sys.stderr)
        return 130
    if manifests is None:  # --merge built the vocabulary (or trained the tokenizer)
        where = redact_text(job.vocabulary.at)
        print(f"vocabulary built: {where}; now run the parts again, then --merge")
    else:
        print_manifests(args.out, manifests)
    return 0


def settings_of(args: argparse.Namespace, out_options: dict, source_options: dict) -> Settings:
    """The run the command line asks for: each option given goes to the ``Settings`` field of
    its name, the others keep Settings' defaults (ValueError: options that do not fit)."""
    names = {f.name for f in fields(Settings)}
    given = {k: v for k, v in vars(args).items() if k in names and v is not None}
    return Settings(
        **given, out_options=out_options, source_options=source_options,
        progress=not args.no_progress,
    )  # fmt: skip


def print_manifests(out: str, manifests: dict[str, Manifest]) -> None:
    """One line per split: its tokens, documents, shards and vocabulary, and where it is."""
    for split, m in manifests.items():
        print(
            f"{split}: {m.tokens} tokens, {m.documents} documents, {len(m.shards)} shards, "
            f"vocab {m.vocab_size}, {m.oov_tokens} out-of-vocabulary"
            + (f", {m.eos_token!r} (id {m.eos_id}) after each document" if m.eos_token else "")
            + f" -> {redact_text(manifest_url(out, split))}"
        )
