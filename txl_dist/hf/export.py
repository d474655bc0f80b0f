"""`txl-export --format hf`: a directory `transformers.AutoModelForCausalLM` loads with
trust_remote_code=True, offline, without our package.

It holds config.json (model_type, auto_map, and our TXLConfig under `txl`), model.safetensors
(every parameter under `txl.`, tied ones under each name), configuration_txl.py and
modeling_txl.py (txl_dist.hf's), and the txl_dist / data_pipeline modules they import, found by
following their imports. Those files are our sources as they are, their package imports made
relative: one source of truth, and a new import of the model code ships with the next export
(or fails it, naming the module, when two would share a file name).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Callable

from txl_dist.hf.tokenizer_files import write_tokenizer_files
from txl_dist.model import TransformerXL
from txl_dist.model.pretrained import CONFIG_FILE, SAFETENSORS_FILE, staged_directory
from txl_dist.model.safetensors_io import save_streaming

ENTRY_MODULES = ("txl_dist.hf.configuration_txl", "txl_dist.hf.modeling_txl")
"""What `auto_map` names; everything they import from our packages is shipped with them."""
AUTO_MAP = {
    "AutoConfig": "configuration_txl.TXLHFConfig",
    "AutoModelForCausalLM": "modeling_txl.TXLForCausalLM",
}
OUR_IMPORT = re.compile(r"^(\s*from )((?:txl_dist|data_pipeline)(?:\.\w+)*)( import )", re.M)
WEIGHT_PREFIX = "txl."  # TXLForCausalLM.txl
USAGE = [
    "Loading the model runs the Python files of this directory (trust_remote_code), as any",
    "remote-code model does; they need torch and transformers only. The tokenizer is the",
    "library's own (tokenizer.json): `AutoTokenizer` reads config.json first, which names",
    "configuration_txl.py, so it asks whether to run that file; trust_remote_code=False (or",
    "PreTrainedTokenizerFast.from_pretrained) loads the tokenizer and runs no code of this",
    "directory. `tokenizer(prompt)` starts with the token txl-generate puts before a prompt",
    "(the end token: every training document follows it), so greedy generate() and",
    "pipeline give txl-generate's tokens.",
    "",
    "```",
    "from transformers import AutoModelForCausalLM, AutoTokenizer",
    "model = AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)",
    "tokenizer = AutoTokenizer.from_pretrained(DIR, trust_remote_code=False)   # no code runs",
    'input_ids = tokenizer("The", return_tensors="pt").input_ids',
    "out = model(input_ids, labels=input_ids)   # out.logits: log-probabilities; out.mems",
    "model.generate(input_ids, max_new_tokens=50, do_sample=False)   # memory carried",
    "```",
]
"""The export README's "Use" section for this format."""


def save_hf(
    model: TransformerXL,
    directory: str,
    write_extra: Callable[[str], None] | None = None,
) -> None:
    """Write the Hugging Face directory of `model`; `write_extra(tmp)` adds the vocabulary,
    data.json and README, then the tokenizer files follow from them (tokenizer_files).
    Replaces `directory` whole, as TransformerXL.save_pretrained does."""
    sources = shipped_sources()
    with staged_directory(directory) as tmp:
        for name, text in sources.items():
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
        weights = {WEIGHT_PREFIX + k: v.contiguous() for k, v in model.state_dict().items()}
        save_streaming(weights, os.path.join(tmp, SAFETENSORS_FILE), {"format": "pt"})
        with open(os.path.join(tmp, CONFIG_FILE), "w") as f:
            json.dump(hf_config(model), f, indent=2)
        if write_extra is not None:
            write_extra(tmp)
            write_tokenizer_files(tmp)


def hf_config(model: TransformerXL) -> dict:
    """config.json of the directory, as TXLHFConfig reads it."""
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return dict(
        model_type="txl_dist", architectures=["TXLForCausalLM"], auto_map=AUTO_MAP,
        dtype=dtype, txl=model.config.to_dict(),
    )  # fmt: skip


def shipped_sources() -> dict[str, str]:
    """{file name: text} of the entry modules and every module of ours they import, transitively,
    with those imports made relative (`from txl_dist.model.config import` -> `from .config`)."""
    files: dict[str, str] = {}
    owner: dict[str, str] = {}
    pending = list(ENTRY_MODULES)
    while pending:
        module = pending.pop()
        name = module.rsplit(".", 1)[-1] + ".py"
        if owner.setdefault(name, module) != module:
            raise ValueError(
                f"{module} and {owner[name]} would both be {name} in the export: rename one"
            )
        if name in files:
            continue
        with open(importlib.util.find_spec(module).origin, encoding="utf-8") as f:
            text = f.read()
        pending += [m.group(2) for m in OUR_IMPORT.finditer(text)]
        files[name] = OUR_IMPORT.sub(
            lambda m: f"{m.group(1)}.{m.group(2).rsplit('.', 1)[-1]}{m.group(3)}", text
        )
    return files
