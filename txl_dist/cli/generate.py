"""txl-generate: sample text from an exported model, one forward step per new token.

    txl-generate --model OUT_DIR --prompt "The meaning of" --max-tokens 100 \\
        [--temperature 1.0] [--top-k 0] [--top-p 1.0] [--seed 0] [--mem-len M] [--json]
    python -m txl_dist.cli.generate ...

A model trained on subword data (its export's tokenizer.json) reads the prompt with that
tokenizer, as it is (no line start before it; an empty prompt is a line break), and prints the
tokens through its decoder, a character once all its bytes are drawn: byte-level BPE prints
exactly the text of the drawn ids (control characters as escapes, as for every model). Where
the data has an end-of-text token (every document ended with it; the export's data.json names
it, whatever its name), the prompt
starts after it and generation stops when the model draws it: the document is over, and
txl-generate says so on stderr.
Otherwise the prompt is split on whitespace and looked up in the model's vocab.txt (unknown
words become the unknown token), after a line start (<eos>, or <S> for lm1b). A character-level
model (enwik8, text8: the export's data.json) reads the prompt as txl-prepare reads its
corpus, one token per byte (enwik8, newlines dropped) or character (text8: a-z and spaces), and
prints its bytes as UTF-8 text (text8's "_" as a space). It is read in one forward pass; then
each sampled token is fed alone and the memory carries the context, so a token costs one step
of length 1 instead of a re-run of the whole context. With --mem-len at least the total length
(prompt + new tokens) the model sees all of it, exactly as a full re-run would. Words are printed
as they are produced; <eos> prints a line break. --json prints one JSON object instead: the
prompt, its ids, the generated ids and their text.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from data_pipeline import DataError
from txl_dist.cli import USAGE_ERROR, interruptible
from txl_dist.exports.generation import Sampling, generate, shown
from txl_dist.exports.loading import DTYPES, refuse_hf_export
from txl_dist.exports.text import ExportText
from txl_dist.model import TransformerXL
from txl_dist.process.threads import choose_threads


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
    p.add_argument(
        "--json", action="store_true",
        help="print one JSON object: prompt, prompt_ids, ids (generated) and text",
    )  # fmt: skip
    return p.parse_args(argv)


@interruptible("txl-generate")
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if argv is None:  # the command, not a caller's main([...]): it sets the process's threads
        choose_threads()  # a busy machine's cores, not torch's one thread per core
    try:
        sampling = Sampling(args.temperature, args.top_k, args.top_p)
        refuse_hf_export(args.model)
        model = TransformerXL.from_pretrained(args.model, map_location=args.device)
        text = ExportText(args.model)
        prompt = text.prompt(args.prompt).to(args.device)
    except (FileNotFoundError, ValueError, DataError) as err:
        print(f"txl-generate: error: {err}", file=sys.stderr)
        return USAGE_ERROR
    ev = model.config.for_eval()
    # same_length is an evaluation device for equal contexts; a generated token sees all it can.
    model.set_lengths(mem_len=args.mem_len or ev.mem_len, clamp_len=ev.clamp_len, same_length=False)
    model.to(DTYPES[args.dtype])
    generator = torch.Generator().manual_seed(args.seed)
    drawn: list[int] = []
    steps = generate(model, prompt, args.max_tokens, sampling, generator, stop=text.eos)
    ids = (drawn.append(token) or token for token, _ in steps)
    if args.json:
        pieces = "".join(text.pieces(ids, args.prompt))
        report = dict(
            prompt=args.prompt, prompt_ids=prompt.tolist(), ids=drawn, text=pieces,
            stopped="eos" if len(drawn) < args.max_tokens else "max_tokens",
        )  # fmt: skip
        print(json.dumps(report))  # ASCII: a token's escapes never reach the terminal
        return 0
    print(args.prompt.strip() if text.words else args.prompt, end="", flush=True)
    for piece in text.pieces(ids, args.prompt):
        print(shown(piece), end="", flush=True)
    print()
    if len(drawn) < args.max_tokens:
        eos = shown(text.subword.decode([text.eos]))
        print(f"txl-generate: stopped at {eos}, the end of a document", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
