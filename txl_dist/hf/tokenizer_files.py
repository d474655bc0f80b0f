"""The tokenizer side of a Hugging Face export: what `AutoTokenizer`, `pipeline` and
`generate()` read beside the model, in the library's own formats (no code of ours runs).

They follow from what the export directory holds, as our commands read it
(txl_dist.exports): its vocab.txt and data.json's level and dataset, or its subword
tokenizer.json and data.json's end-of-text token.

- tokenizer.json: a subword export's own; for word-level data, a `WordLevel` model over vocab.txt
  that reads text as txl-prepare did (whitespace-split words, a line break as <eos>, unknown words
  as the unknown token; a word holding "<eos>" is one word, as in the shards); for
  character-level data (enwik8, text8), a `WordLevel` model over its bytes that reads text as
  txl-generate reads a prompt (`char_level`);
- its post-processor starts a text with the token txl-generate puts before a prompt (`start`):
  every document of the training data follows the end token, so `tok(prompt)`, `generate()`
  and `pipeline` condition the model as txl-generate does, and decoding with
  skip_special_tokens (as `pipeline` does) leaves it out. Subword data's tokenizer.json is
  otherwise the training one (data.json's record and the README's sha256 are of that one;
  our commands refuse a Hugging Face export: txl_dist.exports.loading.refuse_hf_export);
- tokenizer_config.json and special_tokens_map.json: the end, unknown and padding tokens, left
  padding; the end token is <eos> for word-level data and a subword tokenizer's end-of-text
  token (the one txl-prepare wrote after every document: the export's data.json names it),
  which also begins a text (bos, GPT-2's convention); character-level data has no end token
  and nothing before a prompt;
- generation_config.json: their ids, so `generate()` stops at the end token and pads with the
  padding token.

Special tokens are read as text where they are part of a word or a byte string
(split_special_tokens): the shards hold no token that a word's inside made special.
"""

from __future__ import annotations

import json
import os

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

from data_pipeline import DATASETS, EOS, SENTENCE, TOKENIZER_FILE, Subword, Vocab
from data_pipeline.corpora.bytelevel import byte_chars
from txl_dist.exports.generation import char_dataset
from txl_dist.exports.loading import export_tokenizer, export_vocab

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
GENERATION_CONFIG_FILE = "generation_config.json"
MAX_LENGTH = 1_000_000_000
"""model_max_length: the memory makes the context unbounded; this only keeps transformers from
warning about long inputs."""
SHARD_SPACES = [("\r\n", "\n"), ("\r", "\n"), *((chr(c), " ") for c in range(0x1C, 0x20))]
"""What txl-prepare reads word-level text with (data_pipeline's `normalized`) that the library's
`WhitespaceSplit` does not: a carriage return ends a line, and the separators \\x1c-\\x1f, which
Python's str.split() knows and Unicode does not, part words. Other whitespace both split on."""
CHAR_PAD = "<pad>"
"""A character-level export's padding token, one id past the model's vocabulary: every token of
the vocabulary is text (a space, a byte), which a padding token would be taken for."""


def write_tokenizer_files(directory: str) -> None:
    """Add the tokenizer files to an export `directory` that already holds its vocabulary
    (vocab.txt or tokenizer.json) and, for character-level data, its data.json."""
    vocab = export_vocab(directory)
    # "<pad>" in a char-level text is its five characters, as txl-generate reads it, and
    # "<eos>" inside a word part of the word, as txl-prepare read it: not the tokens.
    settings = {"split_special_tokens": True}
    if vocab is None:
        subword = export_tokenizer(directory)
        if subword is None:
            return
        tokenizer, special = Tokenizer.from_str(subword.json_text), subword_special_tokens(subword)
        settings = {}  # the training tokenizer's own: its added tokens were read as tokens
    elif dataset := char_dataset(directory):
        tokenizer, special = char_level(vocab, dataset), {"pad_token": CHAR_PAD}
    else:
        tokenizer, special = word_level(vocab), word_special_tokens(vocab)
    save_starting_with(tokenizer, special.get("bos_token"), directory)
    ids = {f"{role}_id": tokenizer.token_to_id(token) for role, token in special.items()}
    files = {
        TOKENIZER_CONFIG_FILE: dict(
            tokenizer_class="PreTrainedTokenizerFast", padding_side="left",
            clean_up_tokenization_spaces=False, model_max_length=MAX_LENGTH, **settings, **special,
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
    tokenizer.normalizer = normalizers.Sequence([
        *(normalizers.Replace(a, b) for a, b in SHARD_SPACES),
        normalizers.Replace("\n", f" {EOS} "),  # each line ends so
    ])  # fmt: skip
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


def char_level(vocab: Vocab, dataset: str) -> Tokenizer:
    """A tokenizer that encodes text as txl-generate reads a prompt of character-level data
    (DATASETS[dataset].char_tokenizer): the dataset's normalization (enwik8 drops line breaks,
    text8 strips the text), then a token per UTF-8 byte, the same ids, and CHAR_PAD after them.

    Tokens are named by the byte-level alphabet (GPT-2's: a character per byte, a space is
    "Ġ"), so bytes of a character cut in two are tokens too, and the `ByteLevel` decoder gives
    the text back. A byte the vocabulary lacks fails the encoding ("Missing [UNK] token"), where
    txl-generate refuses it in its own words: neither reads it as another token.
    """
    token_bytes = DATASETS[dataset].char_tokenizer.token_bytes
    chars = byte_chars()
    index = {}
    for i, token in enumerate(vocab.tokens):
        try:
            value = token_bytes(token)
        except ValueError:  # a token of no byte (<unk> in a vocabulary given to txl-prepare)
            value = b""
        index[chars[value[0]] if len(value) == 1 else token] = i
    tokenizer = Tokenizer(models.WordLevel(vocab=index, unk_token="[UNK]"))
    tokenizer.normalizer = DATASETS[dataset].char_tokenizer.normalizer()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        pre_tokenizers.Split("", behavior="isolated"),  # every byte's character alone
    ])  # fmt: skip
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([CHAR_PAD])
    return tokenizer


def word_special_tokens(vocab: Vocab) -> dict[str, str]:
    """A word vocabulary's <eos> (a line end; it pads too, GPT-2's convention), the line start
    a prompt follows (<eos>, or <S> for lm1b) and unknown token, those it has."""
    special = {"eos_token": EOS, "pad_token": EOS} if EOS in vocab.index else {}
    start = next((t for t in (EOS, SENTENCE) if t in vocab.index), None)  # txl-generate's
    if start is not None:  # line start
        special["bos_token"] = start
    return special | ({"unk_token": vocab.unk} if vocab.unk else {})


def subword_special_tokens(subword: Subword) -> dict[str, str]:
    """A subword tokenizer's end-of-text token as end, padding and beginning token, and its
    model's unknown token, those it has."""
    special = {}
    if subword.eos is not None:
        special.update(bos_token=subword.eos, eos_token=subword.eos, pad_token=subword.eos)
    unk = json.loads(subword.json_text)["model"].get("unk_token")
    if unk is not None and subword.tokenizer.token_to_id(unk) is not None:
        special["unk_token"] = unk
    return special


def save_starting_with(tokenizer: Tokenizer, start: str | None, directory: str) -> None:
    """Save `tokenizer` as the directory's tokenizer.json with a post-processor that puts
    `start` (None: nothing) before a text, and before a second text too.

    A `ByteLevel` post-processor (offsets only) is kept, any other dropped: txl-prepare encoded
    without it (add_special_tokens=False); truncation and padding are off. Written as JSON:
    the library's template strings cannot hold a token with a space or a colon (txl-prepare
    --eos-token takes any text).
    """
    spec = json.loads(tokenizer.to_str())
    spec.update(truncation=None, padding=None)  # txl-prepare encoded every document whole
    kept = spec.get("post_processor")
    steps = [kept] if isinstance(kept, dict) and kept.get("type") == "ByteLevel" else []
    if start is not None:
        steps.append(start_template(start, tokenizer.token_to_id(start)))
    spec["post_processor"] = (
        {"type": "Sequence", "processors": steps}
        if len(steps) > 1
        else (steps[0] if steps else None)
    )
    with open(os.path.join(directory, TOKENIZER_FILE), "w", encoding="utf-8") as f:
        f.write(json.dumps(spec, ensure_ascii=False))


def start_template(token: str, token_id: int) -> dict:
    """A `TemplateProcessing` post-processor (as tokenizer.json holds it) that puts `token`
    before each text."""
    text = [{"SpecialToken": {"id": token, "type_id": n}} for n in (0, 1)]
    parts = [{"Sequence": {"id": name, "type_id": n}} for n, name in enumerate("AB")]
    return {
        "type": "TemplateProcessing",
        "single": [text[0], parts[0]],
        "pair": [text[0], parts[0], text[1], parts[1]],
        "special_tokens": {token: {"id": token, "ids": [token_id], "tokens": [token]}},
    }
