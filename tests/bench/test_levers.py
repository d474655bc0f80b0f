"""bench/levers.py: a lever that is a model config key times the model built with that key."""

from __future__ import annotations

import torch

from bench.levers import LEVERS
from txl_dist.model import TransformerXL, TXLConfig, attention


def test_the_position_rows_lever_builds_the_model_with_its_key(monkeypatch):
    """Off and on: K + 1 = 9 columns as they are, then padded to 16; the same loss (exact),
    and the model handed in keeps its own config."""
    lever = next(lever for lever in LEVERS if lever.switch.startswith("model.position_row"))
    torch.manual_seed(0)
    config = TXLConfig(
        n_token=50, n_layer=1, n_head=2, d_model=16, d_head=8, d_inner=16, tgt_len=8,
        mem_len=8, dropout=0.0,
    )  # fmt: skip
    model = TransformerXL(config)
    tokens = torch.randint(0, 50, (2, 9))
    widths = []
    apply = attention.ShiftedBias.apply
    monkeypatch.setattr(
        attention.ShiftedBias, "apply", lambda p, m: widths.append(p.size(-1)) or apply(p, m)
    )
    losses = [lever.step(model, tokens, on)() for on in (False, True)]
    assert widths == [9, 16]
    torch.testing.assert_close(losses[0], losses[1])
    assert model.config.position_row_multiple == 8
