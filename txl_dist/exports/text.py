"""An export's text to token ids and back, the way its training data was prepared: for the
harness model, txl-generate and txl-eval --text alike.

Word-level data (vocab.txt): words split on whitespace, a line break read as <eos> (WikiText's
line ends, as txl-eval reads --text), words the vocabulary lacks as its unknown token.
Character-level data (data.json's dataset, enwik8 or text8): the dataset's own tokenizer, as
txl-generate reads a prompt. A tokenizer.json in the export (subword data) takes precedence:
its own ids, no unknown tokens, and its decoder (byte-level BPE gives back the text exactly).
Where the tokenizer has an end-of-text token (data prepared with document boundaries), a
request and a prompt start after it, as every document of the training data does.
"""

from __future__ import annotations

import contextlib
import io
import itertools
from collections.abc import Iterable, Iterator

import numpy as np
import torch

from data_pipeline import DATASETS, EOS, SENTENCE, TOKENIZER_FILE, DataError, Vocab
from data_pipeline.limits import TEXT_BYTES
from data_pipeline.received import decoded, open_received, read_received, too_large
from txl_dist.exports.generation import (
    CharDetokenizer,
    Detokenizer,
    char_dataset,
    prompt_ids,
    subword_pieces,
)
from txl_dist.exports.loading import export_tokenizer, export_vocab
from txl_dist.model.pretrained import VOCAB_FILE

CHAR_START = b" "
"""What a character-level request starts from: the token of a space, a boundary between words."""
SUBWORD_START = "\n"
"""What a subword request starts from without an end-of-text token: a line break (documents
were stored back to back)."""


class ExportText:
    """Encodes and decodes text for the model exported in `model_dir`."""

    def __init__(self, model_dir: str):
        self.subword = export_tokenizer(model_dir)
        self.vocab = export_vocab(model_dir)
        if self.subword is None and self.vocab is None:
            raise FileNotFoundError(
                f"{model_dir} has no {VOCAB_FILE} or {TOKENIZER_FILE}: reading and writing "
                "text needs the export's vocabulary"
            )
        self.dataset = None if self.subword else char_dataset(model_dir)
        self.eos = None if self.subword is None else self.subword.eos_id
        """The subword end-of-text token's id (each training document ended with it), or None:
        generation stops at it."""
        self.start = self._start_ids()
        """The ids every request starts from (a line start), so its first token is scored."""

    def _start_ids(self) -> list[int]:
        if self.eos is not None:
            return [self.eos]
        if self.subword is not None:
            return self.encode(SUBWORD_START)[0].tolist()
        if self.dataset is not None:
            return self._char_ids(CHAR_START)
        return [self.vocab.index[t] for t in (EOS, SENTENCE) if t in self.vocab.index][:1]

    def _char_ids(self, value: bytes) -> list[int]:
        """The id of the character-level token standing for `value` (none if it has none)."""
        token_bytes = DATASETS[self.dataset].char_tokenizer.token_bytes
        for i, token in enumerate(self.vocab.tokens):
            with contextlib.suppress(ValueError):  # a token of no byte (<unk>)
                if token_bytes(token) == value:
                    return [i]
        return []

    def encode(self, text: str) -> tuple[np.ndarray, list[str]]:
        """(int64 ids of `text`, the words of it the vocabulary lacks, read as unknown)."""
        if self.subword is not None:
            ids = self.subword.encode(text)
            return np.asarray(ids, np.int64), []
        if self.dataset is not None:
            tokenizer = DATASETS[self.dataset].char_tokenizer
            names, local = tokenizer.tokens(text.encode("utf-8"), "a harness request")
            ids, _ = self.vocab.encode_local(names, local)
            unknown = [n for n in names if n not in self.vocab.index]
            return ids.astype(np.int64), unknown
        lines = text.split("\n")
        words = [w for line in lines[:-1] for w in (*line.split(), EOS)] + lines[-1].split()
        unknown = [w for w in words if w not in self.vocab.index]
        return self.vocab.encode(words).astype(np.int64), unknown

    def decode(self, ids: list[int]) -> str:
        """The text of `ids` generated after a request (a word after it starts with a space)."""
        if self.subword is not None:
            return self.subword.decode(ids)
        tokens = self.vocab.decode(ids)
        words = CharDetokenizer(self.dataset) if self.dataset else Detokenizer(line_start=False)
        return "".join(words.text(t) for t in tokens)

    @property
    def words(self) -> bool:
        """Word-level: text is read as whitespace-split words (so a prompt's spacing is lost)."""
        return self.subword is None and self.dataset is None

    def prompt(self, text: str) -> torch.Tensor:
        """The int64 ids txl-generate continues: a subword prompt's own ids after the
        end-of-text token (without one: as they are, a line start for none); a word prompt after
        a line start; a character prompt's tokens."""
        if self.subword is None:
            return prompt_ids(text, self.vocab, self.dataset)
        if self.eos is not None:
            ids = np.asarray(self.start + self.encode(text)[0].tolist(), np.int64)
        else:
            ids = self.encode(text)[0] if text else np.asarray(self.start, np.int64)
        return torch.from_numpy(ids)

    def pieces(self, ids: Iterable[int], prompt: str) -> Iterator[str]:
        """The text of generated `ids` (after `prompt`) as they come, piece by piece."""
        if self.subword is not None:
            yield from subword_pieces(self.subword, ids)
            return
        words = CharDetokenizer(self.dataset) if self.dataset else Detokenizer(not prompt.strip())
        for token in ids:
            yield words.text(self.vocab.tokens[token])


def text_ids(path: str, vocab: Vocab) -> tuple[np.ndarray, int]:
    """(ids, unknown words) of a text file tokenized as WikiText, TEXT_LINES lines at a time:
    memory follows the ids, not the words."""
    pieces, unknown = [], 0
    unk = vocab.index.get(vocab.unk, -1)
    lines = _lines(path)
    while block := list(itertools.islice(lines, TEXT_LINES)):
        words = [w for line in block for w in (*line.split(), EOS)]
        ids = vocab.encode(words)
        unknown += sum(1 for w, i in zip(words, ids.tolist()) if i == unk and w != vocab.unk)
        pieces.append(ids)
    return (np.concatenate(pieces) if pieces else np.zeros(0, np.int32)), unknown


TEXT_LINES = 1 << 16
"""Lines of --text tokenized together."""


def _lines(path: str) -> Iterator[str]:
    """The lines of the text file `path` (named on the command line: a pipe is read too), no
    more than TEXT_BYTES of it (counted in characters, as many as its bytes or fewer)."""
    read, cap = 0, TEXT_BYTES.value()
    with io.TextIOWrapper(open_received(path, TEXT_BYTES, "text file", given=True), "utf-8") as f:
        try:
            while line := f.readline(cap + 1 - read):
                read += len(line)
                if read > cap:
                    raise too_large(path, TEXT_BYTES, "text file")
                yield line
        except UnicodeDecodeError as err:
            raise DataError(f"{path} is not a text file (not UTF-8 text: {err})") from None


def read_text(path: str, model_dir: str) -> tuple[np.ndarray, int | None]:
    """(ids, unknown words) of a text file read as the export's data was: by its tokenizer.json
    (no unknown words: None), else as WikiText words; a character-level model is refused.

    A subword file is one document: after the tokenizer's end-of-text token, as every training
    document and every harness request, so its first token is scored too (documents inside it
    are parted by that token's text, which the tokenizer reads as the token)."""
    text = ExportText(model_dir)
    if text.subword is not None:
        data = read_received(path, TEXT_BYTES, "text file", given=True)  # a pipe is read too
        ids = text.encode(decoded(data, path, "text file"))[0]  # the file's own line ends
        if text.eos is not None:
            ids = np.concatenate([np.asarray(text.start, np.int64), ids])
        return ids, None
    if not text.words:
        raise DataError(
            f"{model_dir} is a character-level model and --text is read as words: "
            "prepare the text with txl-prepare (its --dataset) and pass --data"
        )
    return text_ids(path, text.vocab)
