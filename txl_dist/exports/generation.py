"""Generation with the memory: sampling settings, the token loop, prompts and detokenizers.

The prompt goes in as one segment; then each new token alone on the memory, so a token costs
one step of length 1 instead of a re-run of the context. txl-generate and the lm-evaluation-
harness model (txl_dist.harness) both generate through here.
"""

from __future__ import annotations

import codecs
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from data_pipeline import DATASETS, EOS, SENTENCE, Subword, Vocab
from txl_dist.exports.loading import export_level, export_record
from txl_dist.model import TransformerXL

INCOMPLETE = "\ufffd"
"""What a decoder gives for the bytes of a character not all there yet (U+FFFD)."""


@dataclass
class Sampling:
    """How the next token is drawn from the model's distribution."""

    temperature: float = 1.0
    """Divides the log-probabilities; 0 means greedy (always the most likely token)."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 keeps all."""
    top_p: float = 1.0
    """Keep the smallest set of most likely tokens whose probability reaches top_p."""

    def __post_init__(self) -> None:
        if self.temperature < 0 or self.top_k < 0 or not 0 < self.top_p <= 1:
            raise ValueError(
                f"need temperature >= 0, top_k >= 0 and 0 < top_p <= 1; got {self.temperature}, "
                f"{self.top_k}, {self.top_p}"
            )

    def probabilities(self, log_probs: Tensor) -> Tensor:
        """[V] log-probabilities -> [V] sampling probabilities after temperature, top-k, top-p."""
        logits = log_probs.float() / max(self.temperature, 1e-6)
        if self.top_k:
            kth = torch.topk(logits, min(self.top_k, logits.numel())).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if self.top_p < 1:
            sorted_probs, order = torch.sort(probs, descending=True)
            # Drop a token when the more likely ones alone already reach top_p.
            drop = sorted_probs.cumsum(0) - sorted_probs >= self.top_p
            probs = probs.scatter(0, order[drop], 0.0)
            probs = probs / probs.sum()
        return probs

    def draw(self, log_probs: Tensor, generator: torch.Generator) -> int:
        if self.temperature == 0:
            return int(log_probs.argmax())
        probs = self.probabilities(log_probs)
        return int(torch.multinomial(probs.cpu(), 1, generator=generator))


@torch.no_grad()
def generate(
    model: TransformerXL,
    prompt: Tensor,
    max_tokens: int,
    sampling: Sampling,
    generator: torch.Generator,
    stop: int | None = None,
) -> Iterator[tuple[int, Tensor]]:
    """(token id, the [V] log-probabilities it was drawn from) for each new token after `prompt`,
    ending before `stop` once it is drawn (an end-of-text token: the document is over).

    The prompt ([T] int64) goes in as one segment; then each token alone, on the memory.
    """
    segment, mems = prompt[None, :], None
    for _ in range(max_tokens):
        out = model(segment, mems=mems)
        log_probs = out.log_probs[0, -1]
        token = sampling.draw(log_probs, generator)
        if token == stop:
            return
        yield token, log_probs
        segment, mems = torch.tensor([[token]], device=prompt.device), out.mems


def prompt_ids(text: str, vocab: Vocab, dataset: str | None = None) -> Tensor:
    """Line start, then the prompt's words (unknown ones as the unknown token); for a
    character-level ``dataset``, its tokens of the prompt (there is no line start)."""
    if dataset is None:
        start = [t for t in (EOS, SENTENCE) if t in vocab.index][:1]
        return torch.from_numpy(vocab.encode([*start, *text.split()])).long()
    names, local = DATASETS[dataset].char_tokenizer.tokens(text.encode("utf-8"), "--prompt")
    if not len(local):
        raise ValueError(f"a character-level model ({dataset}) needs a --prompt to continue")
    return torch.from_numpy(vocab.encode_local(names, local)[0]).long()


class Detokenizer:
    """Tokens to text: a line break for <eos> / <S>, a space between words on a line."""

    def __init__(self, line_start: bool):
        self.line_start = line_start

    def text(self, token: str) -> str:
        if token in (EOS, SENTENCE):
            self.line_start = True
            return "\n"
        text = token if self.line_start else f" {token}"
        self.line_start = False
        return text


class CharDetokenizer:
    """Character-level tokens to text: their bytes, decoded as UTF-8 once a character is whole."""

    def __init__(self, dataset: str):
        self.dataset = dataset
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def text(self, token: str) -> str:
        return self.decoder.decode(DATASETS[self.dataset].char_tokenizer.token_bytes(token))


def subword_pieces(subword: Subword, ids: Iterable[int]) -> Iterator[str]:
    """The text of subword `ids` as they come: what each one adds to the decoded text, held back
    while that ends in an incomplete character (a byte-level token may carry part of one).
    Joined, the pieces are subword.decode(ids)."""
    seen: list[int] = []
    done = ""
    for token in ids:
        seen.append(token)
        text = subword.decode(seen)
        if not text.endswith(INCOMPLETE):
            yield text[len(done) :]
            done = text
    yield subword.decode(seen)[len(done) :]


def shown(text: str) -> str:
    """text with its control and format characters as escapes (``\\x1b``), line breaks kept: a
    vocabulary's tokens must not drive the terminal (retitle it, clear it, reorder text)."""
    return "".join(
        c if c == "\n" or unicodedata.category(c) not in ("Cc", "Cf") else ascii(c)[1:-1]
        for c in text
    )


def char_dataset(model_dir: str) -> str | None:
    """The export's character-level dataset (None for word-level data); one txl-generate
    cannot tokenize is an error."""
    if export_level(model_dir) != "char":
        return None
    dataset = export_record(model_dir).get("dataset")
    char_level = [d.name for d in DATASETS.values() if d.char_tokenizer]
    if dataset not in char_level:
        raise ValueError(
            f"{model_dir} is a character-level model of {dataset!r}; txl-generate reads "
            f"prompts for {', '.join(char_level)}"
        )
    return dataset
