"""Widths padded inside the weights (heads, d_inner, d_model) compute the paper's model."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from txl_dist.model import TransformerXL, TXLConfig, widths
from txl_dist.model.widths import pad_to


@pytest.mark.parametrize("pre_lnorm", [False, True])
@pytest.mark.parametrize(
    "d_model, d_head, d_inner", [(12, 41, 42), (16, 8, 32)]
)  # fmt: skip
def test_padded_widths_leave_the_model_and_its_gradients_unchanged(
    monkeypatch, pre_lnorm, d_model, d_head, d_inner
):
    """Heads (41 -> 48), d_inner (42 -> 48) and d_model (12 -> 16, the residual stream with
    zero columns and layer norms over the real ones) zero-padded as on CUDA compute the same
    losses, memories and gradients of every parameter in float64 over two segments; widths
    already aligned run as they are. The FLOP count shows which ran."""
    config = TXLConfig(
        n_token=50, cutoffs=[20], n_layer=2, n_head=3, d_model=d_model, d_head=d_head,
        d_inner=d_inner, dropout=0.0, tgt_len=4, mem_len=5, pre_lnorm=pre_lnorm,
        width_multiple=8,
    )  # fmt: skip
    torch.manual_seed(0)
    model = TransformerXL(config).double().train()
    for p in model.parameters():
        torch.nn.init.normal_(p, 0.0, 0.3)
    ids = torch.randint(0, 50, (2, 9))

    def two_segments(padded_devices):
        monkeypatch.setattr(widths, "PADDED_DEVICES", padded_devices)
        model.zero_grad()
        with FlopCounterMode(display=False) as counter:
            first = model(ids[:, :4], ids[:, 1:5])
            second = model(ids[:, 4:8], ids[:, 5:9], first.mems)
        (first.loss.sum() + second.loss.sum()).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        return [first.loss, second.loss, *second.mems], grads, counter.get_total_flops()

    plain, plain_grads, plain_flops = two_segments(set())
    padded, padded_grads, padded_flops = two_segments({"cpu"})
    for got, want in zip(padded + padded_grads, plain + plain_grads):
        assert got.shape == want.shape  # memories keep d_model's width
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert (padded_flops > plain_flops) == (d_head % 8 != 0)


def test_pad_to_appends_zeros_along_one_dimension():
    x = torch.ones(2, 3)
    assert pad_to(x, 3) is x
    assert torch.equal(pad_to(x, 5), torch.cat([x, torch.zeros(2, 2)], 1))
    assert torch.equal(pad_to(x, 4, 0), torch.cat([x, torch.zeros(2, 3)], 0))
