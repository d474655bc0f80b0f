"""Subword tokenizers (the ``tokenizers`` library): ``--tokenizer FILE`` or ``--tokenizer bpe:N``.

A prepared root keeps the tokenizer as ``tokenizer.json``; its sha256 stands where a word
vocabulary's stands in every manifest (``vocab_sha256``) and its vocabulary size is
``vocab_size``, so ``model.n_token: "auto"`` takes it. Token ids are the tokenizer's own.

``bpe:N`` trains a byte-level BPE of N tokens on documents streamed from the train split: the
trainer keeps one count per distinct pre-token (a word with its leading space), never the text,
so its memory grows with the distinct words it sees. txl-prepare hands it a bounded sample
(``--bpe-sample-bytes``, prepare/vocabulary.py), so that memory stays flat in corpus size.
Byte-level BPE covers every byte, so decode(encode(document)) == document for any UTF-8 text.

Document boundaries: every document's ids are followed by the tokenizer's end-of-text token
(``eos``). ``bpe:N`` trains with EOS_TOKEN as its one special token (id 0, one of its N); a given
tokenizer.json uses its own (the first of EOS_NAMES it holds) or the one ``--eos-token`` names,
and one without any is refused (``require_eos``).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import logging
import os
from collections.abc import Iterable, Iterator
from functools import cached_property

import fsspec
import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from data_pipeline.corpora import bytelevel
from data_pipeline.corpora.bytelevel import ByteLevelEncoder, Encoded, PreTokenTooLong
from data_pipeline.corpora.tokenizer_spec import check_ids, check_spec
from data_pipeline.limits import PRE_TOKEN_BYTES, TOKENIZER_BYTES, VOCAB_SIZE
from data_pipeline.received import read_url
from data_pipeline.shards.errors import CorpusFormatError, reading

log = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
BPE_PREFIX = "bpe:"
LIBRARY_ENCODER_ENV = "TXL_LIBRARY_ENCODER"  # =1: no fast byte-level encoder (bytelevel.py)
# The end-of-document token bpe:N trains with (GPT-2's), and the names of end-of-text tokens
# looked for in a given tokenizer, in this order.
EOS_TOKEN = "<|endoftext|>"
EOS_NAMES = (EOS_TOKEN, "<|end_of_text|>", "</s>", "<eos>")
# Documents per call of encode_batch: enough for its threads, few enough to bound memory.
BATCH_DOCUMENTS = 1024


def bpe_size(spec: str) -> int | None:
    """N of ``--tokenizer bpe:N``; None for a tokenizer file (ValueError: N is no size)."""
    if not spec.startswith(BPE_PREFIX):
        return None
    size = spec.removeprefix(BPE_PREFIX)
    most = VOCAB_SIZE.value()
    if not (size.isascii() and size.isdigit() and 256 < int(size) <= most):
        raise ValueError(
            f"--tokenizer {spec!r}: N must be a number of tokens above the 256 bytes and at most "
            f"{VOCAB_SIZE.named()}, e.g. bpe:32000"
        )
    return int(size)


class Subword:
    """A tokenizer of the ``tokenizers`` library, kept as its ``tokenizer.json`` text."""

    eos: str | None = None
    """Its end-of-document token (None: it has none)."""

    def __init__(self, json_text: str, where: str = TOKENIZER_FILE, eos: str | None = None):
        """The tokenizer serialized as ``json_text``, checked before the library parses it
        (tokenizer_spec.py; ``where`` names it in errors). ``eos`` names its end-of-document
        token (``--eos-token``); None: the first of EOS_NAMES it holds, if any."""
        if settings := check_spec(json_text, where):
            log.warning(
                "%s sets %s: turned off, every document is encoded whole and unpadded",
                where, " and ".join(settings),
            )  # fmt: skip
        self.json_text = json_text
        with library_errors(f"{where} is not a tokenizers tokenizer.json"):
            self.tokenizer  # noqa: B018 -- parse now: a bad file is refused where it is named
        check_ids(self.tokenizer, where)
        self.eos = eos if eos is not None else self.known_eos()
        if eos is not None and self.tokenizer.token_to_id(eos) is None:
            raise CorpusFormatError(
                f"--eos-token {eos!r}: {where} has no such token; name one of its tokens, or "
                f"add it to its added_tokens ({add_eos_hint(len(self))})"
            )

    def known_eos(self) -> str | None:
        """The first of EOS_NAMES that is one of the tokenizer's tokens, if any."""
        return next((n for n in EOS_NAMES if self.tokenizer.token_to_id(n) is not None), None)

    def ending_with(self, eos: str | None, where: str) -> Subword:
        """This tokenizer with ``eos`` as its end-of-document token, as the record ``where``
        names the one its data was prepared with (a manifest's, a checkpoint's, an export's
        data.json); None (no record: older data or files) leaves it as it is."""
        if eos is None:
            return self
        if self.tokenizer.token_to_id(eos) is None:
            raise CorpusFormatError(
                f"{where} names the end-of-text token {eos!r}, which its {TOKENIZER_FILE} "
                "lacks: not the tokenizer its data was prepared with; restore that one"
            )
        ended = copy.copy(self)
        ended.eos = eos
        return ended

    @property
    def eos_id(self) -> int | None:
        """The id of the end-of-document token; None without one."""
        return None if self.eos is None else self.tokenizer.token_to_id(self.eos)

    def require_eos(self, where: str) -> Subword:
        """This tokenizer, refused in one line (naming ``where``) without an end-of-text token."""
        if self.eos is None:
            raise CorpusFormatError(
                f"{where} has no end-of-text token (none of {', '.join(EOS_NAMES)}): name one of "
                f"its tokens with --eos-token TEXT, or add one to its added_tokens "
                f"({add_eos_hint(len(self))})"
            )
        return self

    @cached_property
    def tokenizer(self) -> Tokenizer:
        """The library's tokenizer, its truncation and padding off (tokenizer_spec.py)."""
        tokenizer = Tokenizer.from_str(self.json_text)
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return tokenizer

    def __getstate__(self) -> dict:
        # the parsed tokenizer is rebuilt on first use
        return {"json_text": self.json_text, "eos": self.eos}

    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def sha256(self) -> str:
        """sha256 of the tokenizer.json text: what manifests and checkpoints record."""
        return hashlib.sha256(self.json_text.encode("utf-8")).hexdigest()

    @cached_property
    def byte_level(self) -> ByteLevelEncoder | None:
        """The fast exact encoder where the tokenizer is a plain byte-level BPE, else None (and
        where TXL_LIBRARY_ENCODER=1 asks for the library alone)."""
        if os.environ.get(LIBRARY_ENCODER_ENV) == "1" or not bytelevel.fits(self.json_text):
            return None
        return ByteLevelEncoder(self.tokenizer)

    def encode_documents(self, texts: list[str]) -> Encoded:
        """What the library's ``encode`` makes of each document (by bytelevel.py's encoder where
        it applies), but for those holding a pre-token over limits.PRE_TOKEN_BYTES, refused."""
        if self.byte_level is not None:
            return self.byte_level.encode(texts)
        limit = PRE_TOKEN_BYTES.value()
        refused = {
            i: str(PreTokenTooLong(size))
            for i, text in enumerate(texts)
            if len(text) * 4 > limit and (size := self.pre_token_over(text, limit))
        }  # UTF-8: at most 4 bytes a character
        kept = [text for i, text in enumerate(texts) if i not in refused]
        ids, lengths = [], []
        for a in range(0, len(kept), BATCH_DOCUMENTS):
            with library_errors("the tokenizer failed on a document"):
                encodings = self.tokenizer.encode_batch_fast(
                    kept[a : a + BATCH_DOCUMENTS], add_special_tokens=False
                )
            for encoding in encodings:
                ids.append(np.asarray(encoding.ids, np.int32))
                lengths.append(len(encoding.ids))
        all_ids = np.concatenate(ids) if ids else np.zeros(0, np.int32)
        return Encoded(all_ids, np.asarray(lengths, np.int64), refused)

    def pre_token_over(self, text: str, limit: int) -> int:
        """UTF-8 bytes of the longest pre-token of ``text`` if over ``limit``, else 0 (the whole
        text is one without a pre-tokenizer)."""
        pre_tokenizer = self.tokenizer.pre_tokenizer
        spans = [(0, len(text))] if pre_tokenizer is None else [
            span for _, span in pre_tokenizer.pre_tokenize_str(text)
        ]  # fmt: skip
        long = (len(text[a:b].encode("utf-8")) for a, b in spans if (b - a) * 4 > limit)
        return max((size for size in long if size > limit), default=0)

    def encode(self, text: str) -> list[int]:
        """The ids of one text (a request, a prompt)."""
        with library_errors("the tokenizer failed on the text"):
            return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``."""
        with library_errors("the tokenizer failed on the ids"):
            return self.tokenizer.decode(list(map(int, ids)), skip_special_tokens=False)

    def save(self, url: str, storage_options: dict | None = None) -> None:
        """Write tokenizer.json to ``url`` (any fsspec URL)."""
        with fsspec.open(url, "wt", encoding="utf-8", **(storage_options or {})) as f:
            f.write(self.json_text)

    @classmethod
    def load(
        cls,
        url: str,
        storage_options: dict | None = None,
        eos: str | None = None,
        given: bool = False,
    ) -> Subword:
        """Read a tokenizer.json (any fsspec URL; a local one as a received file,
        data_pipeline.received, whose link is followed only if ``given`` on the command line),
        no more than limits.TOKENIZER_BYTES of it (``eos``: its end-of-document token, as
        ``__init__``)."""
        with reading("tokenizer file", url):
            data = read_url(url, TOKENIZER_BYTES, "tokenizer file", storage_options, given)
        try:
            return cls(data.decode("utf-8"), url, eos)
        except UnicodeDecodeError as err:
            raise CorpusFormatError(f"{url} is not a tokenizers tokenizer.json: {err}") from None

    @classmethod
    def train_bpe(cls, size: int, documents: Iterator[str]) -> Subword:
        """A byte-level BPE of ``size`` tokens trained on the streamed ``documents``, EOS_TOKEN
        (id 0) one of them."""
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=size,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
            special_tokens=[EOS_TOKEN],
        )
        tokenizer.train_from_iterator(documents, trainer)
        return cls(tokenizer.to_str())


def add_eos_hint(size: int) -> str:
    """How to add an end-of-text token to a tokenizer.json of ``size`` tokens."""
    return (
        f'{{"id": {size}, "content": "{EOS_TOKEN}", "single_word": false, "lstrip": false, '
        '"rstrip": false, "normalized": false, "special": true}'
    )


@contextlib.contextmanager
def library_errors(what: str) -> Iterator[None]:
    """The tokenizers library's failures as one CorpusFormatError saying ``what``: the bare
    Exceptions it raises, and its panics (pyo3's PanicException, a BaseException that no
    ``except Exception`` catches)."""
    try:
        yield
    except Exception as err:
        raise CorpusFormatError(f"{what}: {err}") from None
    except BaseException as err:
        if type(err).__name__ != "PanicException":
            raise
        raise CorpusFormatError(f"{what}: the tokenizers library panicked ({err})") from None
