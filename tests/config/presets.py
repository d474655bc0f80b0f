"""The shipped configs as the config tests read them."""

import json

from tests.conftest import REPO_ROOT

PRESETS = [
    "tiny", "wt103_base", "large", "lm1b_base", "lm1b_large", "enwik8_base", "enwik8_large",
    "text8_large", "own_bpe",
]  # fmt: skip


def preset(name: str) -> dict:
    values = json.loads((REPO_ROOT / f"configs/{name}.json").read_text())
    if values["model"]["n_token"] == "auto":  # from the data, which these tests do not prepare
        values["model"]["n_token"] = 32_000
    return values
