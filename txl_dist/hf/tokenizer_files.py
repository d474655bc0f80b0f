"""The tokenizer side of a Hugging Face export: what `AutoTokenizer`, `pipeline` and
`generate()` read beside the model, in the library's own formats (no code of ours runs).

- tokenizer.json: a subword export's own; for word-level data, a `WordLevel` model over vocab.txt
  that reads text as txl-prepare did (whitespace-split words, a line break as <eos>, unknown words
  as the unknown token);
- tokenizer_config.json and special_tokens_map.json: the end, unknown and padding tokens, left
  padding; the end token is <eos> for word-level data and a subword tokenizer's end-of-text
  token (the first of data_pipeline.EOS_NAMES it has: what txl-prepare wrote after every
  document), which also begins a text (bos, GPT-2's convention);
- generation_config.json: their ids, so `generate()` stops at the end token.

Character-level exports (enwik8, text8) get none of these yet: their tokens are bytes or
characters named by txl-prepare's own scheme, which no `tokenizers` model reads alike.
"""

from __future__ import annotations

import json
import os

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from data_pipeline import EOS, EOS_NAMES, TOKENIZER_FILE, Vocab
from txl_dist.model.transformer import VOCAB_FILE

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
GENERATION_CONFIG_FILE = "generation_config.json"
MAX_LENGTH = 1_000_000_000
"""model_max_length: the memory makes the context unbounded; this only keeps transformers from
warning about long inputs."""


def write_tokenizer_files(directory: str, level: str) -> None:
    """Add the tokenizer files to an export `directory` that already holds its vocabulary
    (tokenizer.json or vocab.txt); `level` is its data's (word or char)."""
    path = os.path.join(directory, TOKENIZER_FILE)
    subword = os.path.exists(path)
    if not subword:
        if level != "word":
            return
        Tokenizer.save(word_level(Vocab.load(os.path.join(directory, VOCAB_FILE))), path)
    tokenizer = Tokenizer.from_file(path)
    special = special_tokens(tokenizer, subword)
    ids = {f"{role}_id": tokenizer.token_to_id(token) for role, token in special.items()}
    files = {
        TOKENIZER_CONFIG_FILE: dict(
            tokenizer_class="PreTrainedTokenizerFast", padding_side="left",
            clean_up_tokenization_spaces=False, model_max_length=MAX_LENGTH, **special,
        ),
        SPECIAL_TOKENS_FILE: special,
        GENERATION_CONFIG_FILE: {k: v for k, v in ids.items() if k != "unk_token_id"},
    }  # fmt: skip
    for name, values in files.items():
        with open(os.path.join(directory, name), "w") as f:
            json.dump(values, f, indent=2)


def word_level(vocab: Vocab) -> Tokenizer:
    """A `WordLevel` tokenizer that encodes text as txl-prepare encoded word-level data."""
    unk = vocab.unk or EOS  # a vocabulary without an unknown token: every word is in it
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab.index, unk_token=unk))
    tokenizer.normalizer = normalizers.Replace("\n", f" {EOS} ")  # each line ends so
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens([t for t in (EOS, vocab.unk) if t in vocab.index])
    return tokenizer


def special_tokens(tokenizer: Tokenizer, subword: bool = False) -> dict[str, str]:
    """eos, pad and unk tokens of `tokenizer` that it has: the end token pads too (GPT-2's
    convention); a `subword` tokenizer's end-of-text token (data_pipeline.EOS_NAMES) is its end
    token, and begins a text too."""
    vocab = tokenizer.get_vocab()
    special = {}
    if subword:
        end = next((name for name in EOS_NAMES if name in vocab), None)
        if end is not None:
            special.update(bos_token=end, eos_token=end, pad_token=end)
    elif EOS in vocab:
        special.update(eos_token=EOS, pad_token=EOS)
    unk = json.loads(tokenizer.to_str())["model"].get("unk_token")
    if unk in vocab:
        special["unk_token"] = unk
    return special
