"""What a tokenizer.json from elsewhere may hold, checked before the library parses it.

The tokenizers library runs whatever a tokenizer.json describes, regular expressions included:
one pattern took time cubic in the text (2,000 characters: 47 s), another panicked inside the
library. A file is accepted only when its size and vocabulary are within the caps (limits.py)
and every component is one of ALLOWED, its regular expressions (a Split pre-tokenizer's, a
Replace's) only KNOWN_PATTERNS: those of the tokenizers in wide use. TXL_TRUST_TOKENIZER=1
accepts any pattern of a file you trust. Once parsed, its token ids must be exactly 0..size-1:
the rows of the model's embedding.

A file may also say how to encode: `truncation` (a length past which every text is cut),
`padding` (pad ids inside the documents; a huge fixed length aborts the library) and a BPE's
`dropout` (merges skipped at random). Files saved with truncation on are common, so truncation
and padding are turned off (subword.py, with one warning); dropout, which would make every
encoding differ, is refused.
"""

from __future__ import annotations

import json
import os

from tokenizers import Tokenizer

from data_pipeline.limits import TOKENIZER_BYTES, VOCAB_SIZE
from data_pipeline.shards.errors import CorpusFormatError

TRUST_ENV = "TXL_TRUST_TOKENIZER"  # =1: any regular expression of a tokenizer file you trust
# The components txl-dist accepts, by the key holding them (and the key of a Sequence's parts).
ALLOWED = {
    "normalizer": {
        "BertNormalizer", "ByteLevel", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "Nmt",
        "Precompiled", "Prepend", "Replace", "Sequence", "Strip", "StripAccents",
    },
    "pre_tokenizer": {
        "BertPreTokenizer", "ByteLevel", "CharDelimiterSplit", "Digits", "Metaspace",
        "Punctuation", "Sequence", "Split", "UnicodeScripts", "Whitespace", "WhitespaceSplit",
    },
    "model": {"BPE", "Unigram", "WordLevel", "WordPiece"},
    "decoder": {
        "BPEDecoder", "ByteFallback", "ByteLevel", "CTC", "Fuse", "Metaspace", "Replace",
        "Sequence", "Strip", "WordPiece",
    },
    "post_processor": {
        "BertProcessing", "ByteLevel", "RobertaProcessing", "Sequence", "TemplateProcessing",
    },
}  # fmt: skip
SEQUENCE_PARTS = {
    "normalizer": "normalizers",
    "pre_tokenizer": "pretokenizers",
    "decoder": "decoders",
    "post_processor": "processors",
}
ENCODING_SETTINGS = ("truncation", "padding")
"""What a tokenizer.json may set that txl-dist turns off: every document is encoded whole."""
# Regular expressions of the tokenizers in wide use, by whose they are.
KNOWN_PATTERNS = {
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+": "GPT-2's",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "GPT-4's and Llama 3's",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+": "Qwen 2's",
    r" {2,}": "runs of spaces",
}


def check_spec(json_text: str, where: str) -> list[str]:
    """Refuse a tokenizer.json over the caps, holding a component not allowed or a BPE dropout,
    in one line naming ``where`` and the component's key; the ENCODING_SETTINGS it sets, which
    the caller turns off."""
    if len(json_text) > TOKENIZER_BYTES.value():  # characters: at most as many as bytes
        raise too_large(where)
    try:
        spec = json.loads(json_text)
    except (ValueError, RecursionError) as err:
        raise CorpusFormatError(f"{where} is not a tokenizers tokenizer.json: {err}") from None
    if not isinstance(spec, dict):
        raise CorpusFormatError(f"{where} is not a tokenizers tokenizer.json: not an object")
    for key in ALLOWED:
        check_component(spec.get(key), key, key, where)
    check_vocabulary_size(spec, where)
    check_dropout(spec.get("model"), where)
    return [key for key in ENCODING_SETTINGS if spec.get(key) is not None]


def check_dropout(model: object, where: str) -> None:
    """Refuse a BPE dropout: merges skipped at random, so no two encodings of a text agree."""
    dropout = model.get("dropout") if isinstance(model, dict) else None
    if dropout not in (None, 0, 0.0):
        raise CorpusFormatError(
            f"{where}: model.dropout is {dropout!r}: BPE dropout segments text at random (for "
            "training a tokenizer's users, not for preparing data); set it to null"
        )


def too_large(where: str) -> CorpusFormatError:
    """The refusal of a tokenizer file over limits.TOKENIZER_BYTES."""
    return CorpusFormatError(
        f"{where} holds more than {TOKENIZER_BYTES.named()} bytes: not a tokenizer (or raise "
        "the cap for a file you trust)"
    )


def check_component(component: object, kind: str, key: str, where: str) -> None:
    """Refuse a component (and a Sequence's parts) that is not one of ALLOWED[kind]."""
    if component is None:
        return
    name = component.get("type") if isinstance(component, dict) else None
    if name not in ALLOWED[kind]:
        raise CorpusFormatError(
            f"{where}: {key} is {name!r}, which txl-dist does not accept; accepted: "
            f"{', '.join(sorted(ALLOWED[kind]))} (docs/security.md)"
        )
    pattern = component.get("pattern")
    if isinstance(pattern, dict) and "Regex" in pattern:
        check_pattern(pattern["Regex"], f"{key}.pattern", where)
    parts = component.get(SEQUENCE_PARTS.get(kind, ""))
    if name == "Sequence" and isinstance(parts, list):
        for i, part in enumerate(parts):
            check_component(part, kind, f"{key}.{SEQUENCE_PARTS[kind]}[{i}]", where)


def check_pattern(pattern: object, key: str, where: str) -> None:
    """Refuse a regular expression none of the tokenizers in wide use has (unless trusted)."""
    if pattern in KNOWN_PATTERNS or os.environ.get(TRUST_ENV) == "1":
        return
    known = ", ".join(KNOWN_PATTERNS.values())
    raise CorpusFormatError(
        f"{where}: {key} is the regular expression {str(pattern)[:80]!r}, not one of the "
        f"tokenizers' txl-dist knows ({known}); a pattern can take time cubic in the text: "
        f"set {TRUST_ENV}=1 only for a file you trust"
    )


def check_vocabulary_size(spec: dict, where: str) -> None:
    """Refuse a vocabulary (or merges) over limits.VOCAB_SIZE before the library reads it."""
    model = spec.get("model") if isinstance(spec.get("model"), dict) else {}
    entries = {
        "model.vocab": model.get("vocab"),
        "model.merges": model.get("merges"),
        "added_tokens": spec.get("added_tokens"),
    }
    for key, value in entries.items():
        if isinstance(value, (dict, list)) and len(value) > VOCAB_SIZE.value():
            raise CorpusFormatError(
                f"{where}: {key} holds {len(value)} entries, more than {VOCAB_SIZE.named()}"
            )


def check_ids(tokenizer: Tokenizer, where: str) -> None:
    """Refuse token ids other than exactly 0..size-1 (a shard would hold ids past the model's
    embedding rows)."""
    ids = set(tokenizer.get_vocab(with_added_tokens=True).values())
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if ids != set(range(size)):
        found = f"{min(ids)}..{max(ids)}" if ids else "none"
        raise CorpusFormatError(
            f"{where}: its {size} tokens must have the ids 0..{size - 1}, found {len(ids)} "
            f"distinct ids in {found}"
        )
