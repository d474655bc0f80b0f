"""An exported model's directory as the command-line tools read it: dtypes and the vocabulary.

The files themselves (config.json, weights, vocab.txt or tokenizer.json) are written and loaded by
TransformerXL.save_pretrained / from_pretrained; txl-export, txl-eval and txl-generate share
what else they need of an export here rather than importing each other.
"""

from __future__ import annotations

import os

import torch

from data_pipeline import TOKENIZER_FILE, DataError, Subword, Vocab
from txl_dist.evaluation.context import check_lengths
from txl_dist.evaluation.scores import SCORE_OF_LEVEL
from txl_dist.model import TransformerXL
from txl_dist.model.pretrained import CONFIG_FILE, VOCAB_FILE, read_json

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

EVAL_ROWS = 10
"""Rows an evaluation scores side by side unless told: the reference eval.py's batch size."""

DATA_FILE = "data.json"
"""What the model was trained on: {"dataset": name, "level": "char", "word" or "subword"
(exports of subword data from before it was recorded say "word")}, how its run
evaluated: {"evaluation": {"rows": global evaluation rows, "dtype": the run's precision}}, and
for subword data its tokenizer.json's record: {"tokenizer": {"sha256": ..., "bytes": ...}} and
the end-of-document token its data was prepared with: {"eos_token": text}."""
EOS_KEY = "eos_token"
"""data.json's end-of-document token; an export without it (from before it was recorded)
takes its tokenizer's own end-of-text token (data_pipeline.EOS_NAMES)."""


def refuse_hf_export(model_dir: str) -> None:
    """Refuse, in one line, a Hugging Face export (txl-export --format hf: its config.json is
    transformers', with an `auto_map`), which our commands would read as a config of unknown
    keys."""
    path = os.path.join(model_dir, CONFIG_FILE)
    try:
        values = read_json(path, "the export's config (config.json)")
    except (OSError, ValueError):
        return  # no export, or not one of ours: the loaders say which, in their words
    if isinstance(values, dict) and "auto_map" in values:
        raise ValueError(
            f"{model_dir} is a Hugging Face export (txl-export --format hf): load it with "
            "transformers (AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)), "
            "or pass a txl-export directory (txl-export without --format hf)"
        )


def export_data(model_dir: str) -> dict:
    """The export's data.json ({} for an export without one: written before char-level data,
    or by save_pretrained alone)."""
    path = os.path.join(model_dir, DATA_FILE)
    if not os.path.lexists(path):
        return {}
    return read_json(path, "record of the export's data (data.json)")


# data.json's keys txl-export writes, by the JSON type each must have where present.
RECORD_TYPES = {"dataset": str, "level": str, EOS_KEY: str, "evaluation": dict, "tokenizer": dict}


def export_record(model_dir: str) -> dict:
    """The export's data.json (export_data), refused in one line naming the key unless it is
    a JSON object whose keys have the types txl-export writes."""
    values = export_data(model_dir)
    path = os.path.join(model_dir, DATA_FILE)
    if not isinstance(values, dict):
        raise ValueError(
            f"{path} holds a JSON {type(values).__name__}, not an object: not txl-export's "
            "record of the data; export the checkpoint again"
        )
    for key, kind in RECORD_TYPES.items():
        if key in values and not isinstance(values[key], kind):
            what = "a text" if kind is str else "an object"
            raise ValueError(
                f"{path}: {key} {values[key]!r:.80} is not {what}, as txl-export writes it; "
                "export the checkpoint again"
            )
    return values


def export_level(model_dir: str) -> str:
    """The level of the export's training data: subword where the export carries a
    tokenizer.json, else data.json's (char or word; word for an export without one)."""
    if os.path.exists(os.path.join(model_dir, TOKENIZER_FILE)):
        return "subword"
    level = export_record(model_dir).get("level", "word")
    if level not in SCORE_OF_LEVEL:
        path = os.path.join(model_dir, DATA_FILE)
        raise ValueError(f"{path}: level {level!r} is not one of {', '.join(SCORE_OF_LEVEL)}")
    return level


def export_evaluation(model_dir: str, device: torch.device) -> tuple[int, str]:
    """(rows, dtype) the training run evaluated with, so txl-eval scores as the engine did:
    EVAL_ROWS and fp32 for an export that does not say (older, or save_pretrained's), fp32 for
    an fp16 run on a CPU (fp16 is a GPU's precision)."""
    refuse_hf_export(model_dir)  # txl-eval's first look at an export
    evaluation = export_record(model_dir).get("evaluation", {})
    rows, dtype = evaluation.get("rows", EVAL_ROWS), evaluation.get("dtype", "fp32")
    if not (isinstance(rows, int) and rows > 0 and dtype in DTYPES):
        path = os.path.join(model_dir, DATA_FILE)
        raise ValueError(
            f"{path}: evaluation {evaluation!r} is not {{rows: >= 1, dtype: one of "
            f"{', '.join(DTYPES)}}}; export the checkpoint again"
        )
    return rows, "fp32" if dtype == "fp16" and device.type == "cpu" else dtype


def check_rows(rows: int, tokens: int, source: str) -> None:
    """Refuse more rows than the data has tokens (a received data.json's evaluation.rows is a
    number of rows to allocate memories for): checked before anything is allocated."""
    if rows > max(tokens, 1):
        raise ValueError(
            f"{rows} rows (--batch-size, else the export's data.json evaluation.rows) for the "
            f"{tokens} tokens of {source}: pass a smaller --batch-size"
        )


def export_vocab(model_dir: str) -> Vocab | None:
    """The export's vocabulary (vocab.txt), if it has one."""
    path = os.path.join(model_dir, VOCAB_FILE)
    return Vocab.load(path) if os.path.exists(path) else None


def export_tokenizer(model_dir: str) -> Subword | None:
    """The export's subword tokenizer (tokenizer.json), if its data had one, checked against
    the record txl-export made of it (data.json) and the model's n_token (config.json), its
    end-of-document token data.json's."""
    path = os.path.join(model_dir, TOKENIZER_FILE)
    if not os.path.exists(path):
        return None
    subword = Subword.load(path)
    recorded = export_record(model_dir).get("tokenizer")
    if recorded is not None and recorded != tokenizer_record(subword):
        found = tokenizer_record(subword)
        raise DataError(
            f"{path} has sha256 {found['sha256'][:12]} ({found['bytes']} bytes) but {DATA_FILE} "
            f"records {str(recorded.get('sha256'))[:12]} ({recorded.get('bytes')} bytes): not "
            "the tokenizer the model was trained with; restore it or export the checkpoint again"
        )
    n_token = export_n_token(model_dir)
    if n_token is not None and len(subword) != n_token:
        raise DataError(
            f"{path} has {len(subword)} tokens but {CONFIG_FILE} has n_token {n_token}: the "
            "tokenizer is not the model's; restore it or export the checkpoint again"
        )
    eos = export_record(model_dir).get(EOS_KEY)
    return subword.ending_with(eos, os.path.join(model_dir, DATA_FILE))


def tokenizer_record(subword: Subword) -> dict:
    """What an export's data.json records of its tokenizer.json: sha256 and size."""
    return {"sha256": subword.sha256, "bytes": len(subword.json_text.encode("utf-8"))}


def export_n_token(model_dir: str) -> int | None:
    """The model's n_token (config.json), None without one (a directory of a tokenizer alone)."""
    path = os.path.join(model_dir, CONFIG_FILE)
    if not os.path.lexists(path):
        return None
    values = read_json(path, "model config (config.json)")
    return values.get("n_token") if isinstance(values, dict) else None


def export_vocabulary(model_dir: str) -> Vocab | Subword | None:
    """The export's tokenizer.json, else its vocab.txt; None if it has neither."""
    tokenizer = export_tokenizer(model_dir)
    return export_vocab(model_dir) if tokenizer is None else tokenizer


def load_for_evaluation(
    path: str,
    device: torch.device,
    dtype: str = "fp32",
    tgt_len: int | None = None,
    mem_len: int | None = None,
    clamp_len: int | None = None,
    same_length: bool | None = None,
    check: bool = True,
) -> TransformerXL:
    """The exported model in eval mode with its evaluation lengths, each one given here (not
    None) overriding the export's; `check` refuses lengths it cannot score with (a sweep
    checks each of its own)."""
    refuse_hf_export(path)
    model = TransformerXL.from_pretrained(path, map_location=device)
    ev = model.config.for_eval()
    lengths = [
        ev_value if value is None else value
        for value, ev_value in zip(
            (tgt_len, mem_len, clamp_len, same_length),
            (ev.tgt_len, ev.mem_len, ev.clamp_len, ev.same_length),
        )
    ]
    if check:
        check_lengths(lengths[1], lengths[3])
    model.set_lengths(*lengths)
    return model.to(DTYPES[dtype]).eval()
