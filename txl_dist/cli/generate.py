"""txl-generate: sample text from an exported model, one forward step per new token.

    txl-generate --model OUT_DIR --prompt "The meaning of" --max-tokens 100 \\
        [--temperature 1.0] [--top-k 0] [--top-p 1.0] [--seed 0] [--mem-len M]
    python -m txl_dist.cli.generate ...

The prompt is split on whitespace and looked up in the model's vocab.txt (unknown words become the
unknown token), after a line start (<eos>, or <S> for lm1b). A character-level model (enwik8,
text8: the export's data.json) reads the prompt as txl-prepare reads its corpus, one token per
byte (enwik8, newlines dropped) or character (text8: a-z and spaces), and prints its bytes as
UTF-8 text (text8's "_" as a space). It is read in one forward pass; then
each sampled token is fed alone and the memory carries the context, so a token costs one step
of length 1 instead of a re-run of the whole context. With --mem-len at least the total length
(prompt + new tokens) the model sees all of it, exactly as a full re-run would. Words are printed
as they are produced; <eos> prints a line break.
"""

from __future__ import annotations

import argparse
import codecs
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from data_pipeline.corpora.datasets import DATASETS
from data_pipeline.errors import DataError
from data_pipeline.vocab import EOS, SENTENCE, Vocab
from txl_dist.cli import USAGE_ERROR
from txl_dist.exported import DTYPES, export_data, export_level, export_vocab
from txl_dist.model import TransformerXL
from txl_dist.model.transformer import VOCAB_FILE


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
) -> Iterator[tuple[int, Tensor]]:
    """(token id, the [V] log-probabilities it was drawn from) for each new token after `prompt`.

    The prompt ([T] int64) goes in as one segment; then each token alone, on the memory.
    """
    segment, mems = prompt[None, :], None
    for _ in range(max_tokens):
        out = model(segment, mems=mems)
        log_probs = out.log_probs[0, -1]
        token = sampling.draw(log_probs, generator)
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


def char_dataset(model_dir: str) -> str | None:
    """The export's character-level dataset (None for word-level data); one txl-generate
    cannot tokenize is an error."""
    if export_level(model_dir) != "char":
        return None
    dataset = export_data(model_dir).get("dataset")
    char_level = [d.name for d in DATASETS.values() if d.char_tokenizer]
    if dataset not in char_level:
        raise ValueError(
            f"{model_dir} is a character-level model of {dataset!r}; txl-generate reads "
            f"prompts for {', '.join(char_level)}"
        )
    return dataset


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="txl-generate", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="directory written by txl-export")
    p.add_argument(
        "--prompt", default="", help="text to continue (words; characters for char-level)"
    )
    p.add_argument("--max-tokens", type=int, default=100, help="tokens to generate")
    p.add_argument("--temperature", type=float, default=1.0, help="0: greedy")
    p.add_argument("--top-k", type=int, default=0, help="0: no top-k filtering")
    p.add_argument("--top-p", type=float, default=1.0, help="1: no nucleus filtering")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--mem-len", type=int, help="memory length (default: the eval mem_len)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        sampling = Sampling(args.temperature, args.top_k, args.top_p)
        model = TransformerXL.from_pretrained(args.model, map_location=args.device)
        vocab = export_vocab(args.model)
        if vocab is None:
            raise FileNotFoundError(f"{args.model} has no {VOCAB_FILE}: generation needs it")
        dataset = char_dataset(args.model)
        prompt = prompt_ids(args.prompt, vocab, dataset).to(args.device)
    except (FileNotFoundError, ValueError, DataError) as err:
        print(f"txl-generate: error: {err}", file=sys.stderr)
        return USAGE_ERROR
    ev = model.config.for_eval()
    # same_length is an evaluation device for equal contexts; a generated token sees all it can.
    model.set_lengths(mem_len=args.mem_len or ev.mem_len, clamp_len=ev.clamp_len, same_length=False)
    model.to(DTYPES[args.dtype])
    generator = torch.Generator().manual_seed(args.seed)
    print(args.prompt if dataset else args.prompt.strip(), end="", flush=True)
    words = CharDetokenizer(dataset) if dataset else Detokenizer(not args.prompt.strip())
    for token, _ in generate(model, prompt, args.max_tokens, sampling, generator):
        print(words.text(vocab.tokens[token]), end="", flush=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
