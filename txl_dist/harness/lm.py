"""TXLM: an exported model as the harness's `LM`, Transformer-XL's memory kept across segments.

- loglikelihood_rolling: each document is one stream scored exactly as `txl-eval --text
  --batch-size 1` scores a file: segments of the evaluation tgt_len, memory carried, every
  token once (the first after a line start, so the whole document counts).
- loglikelihood: the context is run first, segment by segment through the memory; the
  continuation is then scored on that memory. Requests whose contexts have the same length
  share a batch (rows never hold padding before their tokens, so batching changes nothing).
- generate_until: txl-generate's generation (the prompt in one segment, then each token alone on
  the memory, same_length off), stopped at the first `until` string.

Subword data prepared with document boundaries (its tokenizer's end-of-text token after every
document): every request is a document of its own, so it starts after that token, as each
training document did and as the harness's Hugging Face models start after theirs. A rolling
document's figures are per document: its own tokens are scored after that token, the first
included, and not the closing token, which the text does not hold (so word and byte
perplexities compare with the harness's other models); generation stops at the token too.

Lengths are the export's evaluation ones (eval_tgt_len, eval_mem_len, eval_clamp_len,
eval_same_length) unless given, as in txl-eval. One process: under a multi-rank launcher it
refuses to start (the harness would score every request on every rank).

The scoring itself is txl_dist.evaluation.requests' (on the loaded model); this module is the
harness's side: the export loaded, its text read and written, generation.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from lm_eval.api.instance import Instance
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from tqdm import tqdm

from txl_dist.evaluation.requests import (
    rolling_loglikelihood,
    same_context_length,
    score_continuations,
)
from txl_dist.exports.generation import Sampling, generate
from txl_dist.exports.loading import EVAL_ROWS, load_for_evaluation
from txl_dist.exports.text import ExportText
from txl_dist.process.dist import world_from_env

log = logging.getLogger(__name__)

MAX_GEN_TOKS = 256
"""Tokens generate_until produces at most when the task does not say (the harness's default)."""


@register_model("txl")
class TXLM(LM):
    """The model txl-export wrote in `pretrained`, for `lm_eval.simple_evaluate(model=TXLM(...))`
    (or model="txl", model_args="pretrained=DIR")."""

    def __init__(
        self,
        pretrained: str,
        batch_size: int | str = EVAL_ROWS,
        device: str | None = None,
        dtype: str = "fp32",
        tgt_len: int | None = None,
        mem_len: int | None = None,
        clamp_len: int | None = None,
        same_length: bool | None = None,
        seed: int = 0,
    ):
        super().__init__()
        if world_from_env().world_size > 1:
            raise ValueError(
                "the harness model runs on one rank: start it without torchrun or srun"
            )
        if not str(batch_size).isdigit() or int(batch_size) < 1:
            raise ValueError(f"batch_size must be a number of rows, got {batch_size!r}")
        self.batch_size = int(batch_size)
        self._device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        lengths = dict(tgt_len=tgt_len, mem_len=mem_len, clamp_len=clamp_len)
        same = None if same_length is None else bool(same_length)
        self.model = load_for_evaluation(
            pretrained, self._device, dtype, **lengths, same_length=same
        )
        self.text = ExportText(pretrained)
        self.generator = torch.Generator().manual_seed(seed)
        self.unknown_said = False

    def encode(self, text: str) -> list[int]:
        """Ids of `text`; the first request with words the vocabulary lacks says so, once."""
        ids, unknown = self.text.encode(text)
        if unknown and not self.unknown_said:
            self.unknown_said = True
            log.warning(
                "requests hold words the vocabulary lacks (first: %s): they are read as the "
                "unknown token, as txl-eval reads them; said once",
                ", ".join(repr(w) for w in list(dict.fromkeys(unknown))[:5]),
            )
        return ids.tolist()

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """(line start + context ids, continuation ids), cut from the ids of the whole text as
        the harness's own models cut them (a continuation's leading space stays its own)."""
        whole = self.encode(context + continuation)
        cut = len(self.encode(context))
        return self.text.start + whole[:cut], whole[cut:]

    # ---- the harness's three requests ----

    def loglikelihood_rolling(self, requests: list[Instance], disable_tqdm: bool = False):
        results = []
        for request in tqdm(requests, desc="rolling", disable=True if disable_tqdm else None):
            (text,) = request.args
            ids = np.asarray(self.text.start + self.encode(text), np.int64)
            results.append(rolling_loglikelihood(self.model, ids, self._device))
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), results[-1])
        return results

    def loglikelihood(self, requests: list[Instance], disable_tqdm: bool = False):
        pairs = [self.encode_pair(*request.args) for request in requests]
        results: list[tuple[float, bool]] = [(0.0, True)] * len(pairs)
        bar = tqdm(total=len(pairs), desc="loglikelihood", disable=True if disable_tqdm else None)
        for batch in same_context_length(pairs, self.batch_size):
            scores = score_continuations(self.model, [pairs[i] for i in batch], self._device)
            for i, score in zip(batch, scores):
                results[i] = score
                self.cache_hook.add_partial("loglikelihood", requests[i].args, score)
            bar.update(len(batch))
        bar.close()
        return results

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        # same_length is an evaluation device for equal contexts; a generated token sees all it
        # can, as in txl-generate.
        with self.model.lengths(same_length=False):
            return [
                self.generate_one(*request.args)
                for request in tqdm(
                    requests, desc="generate", disable=True if disable_tqdm else None
                )
            ]

    # ---- generation ----

    def generate_one(self, context: str, gen_kwargs: dict) -> str:
        """The text generated after `context` up to the first of gen_kwargs' `until` strings (or
        the end-of-text token)."""
        options = dict(gen_kwargs)
        until = options.pop("until", None) or []
        until = [until] if isinstance(until, str) else list(until)
        max_tokens = int(options.pop("max_gen_toks", MAX_GEN_TOKS))
        do_sample = options.pop("do_sample", False)
        temperature = float(options.pop("temperature", 1.0))
        sampling = Sampling(
            temperature=temperature if do_sample else 0.0,
            top_k=int(options.pop("top_k", None) or 0),
            top_p=float(options.pop("top_p", None) or 1.0),
        )
        if options:
            log.warning("generate_until ignores %s", ", ".join(sorted(options)))
        prompt = torch.tensor(self.text.start + self.encode(context), device=self._device)
        ids: list[int] = []
        text = ""
        steps = generate(
            self.model, prompt, max_tokens, sampling, self.generator, stop=self.text.eos
        )
        for token, _ in steps:
            ids.append(token)
            text = self.text.decode(ids)
            stops = [text.index(s) for s in until if s in text]
            if stops:
                return text[: min(stops)]
        return text
