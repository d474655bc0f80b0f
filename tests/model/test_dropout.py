"""CPU dropout masks cut from random words: the drop rate in every lane, unbiased, exact grads."""

import pytest
import torch

from txl_dist.model.dropout import LEVELS, Dropout

P = 0.1
KEPT_SCALE = LEVELS / (LEVELS - round(P * LEVELS))


def test_every_lane_of_a_random_word_drops_p_and_the_mean_is_kept():
    torch.manual_seed(0)
    out = Dropout(P).train()(torch.ones(4 * 250_000))
    # Elements 4j .. 4j+3 share one 64-bit word: a lane whose bits were not all random (say
    # the sign bit of a non-negative draw) would drop at another rate than the rest.
    for lane in range(4):
        assert (out[lane::4] == 0).float().mean().item() == pytest.approx(P, abs=0.004)
    assert out.mean().item() == pytest.approx(1.0, abs=0.003)
    torch.testing.assert_close(out.unique(), torch.tensor([0.0, KEPT_SCALE]))


def test_gradient_is_the_mask_times_the_scale_for_any_layout():
    torch.manual_seed(0)
    x = torch.randn(7, 5, 3).transpose(0, 2).requires_grad_(True)  # odd size, not contiguous
    out = Dropout(P).train()(x)
    out.backward(torch.ones_like(out))
    kept = out != 0
    torch.testing.assert_close(out, x.detach() * kept * KEPT_SCALE)
    torch.testing.assert_close(x.grad, kept.float() * KEPT_SCALE)


def test_same_seed_same_mask_and_no_dropout_outside_training():
    x = torch.randn(64, 33)
    masks = []
    for _ in range(2):
        torch.manual_seed(3)
        masks.append(Dropout(P).train()(x) == 0)
    assert torch.equal(*masks) and masks[0].any()
    assert Dropout(P).eval()(x) is x
    assert Dropout(0.0).train()(x) is x


def test_bf16_is_scaled_in_float32_as_torch_dropout_is():
    torch.manual_seed(0)
    out = Dropout(P).train()(torch.ones(1000, dtype=torch.bfloat16))
    reference = torch.nn.functional.dropout(torch.ones(1000, dtype=torch.bfloat16), P)
    assert out.dtype == torch.bfloat16
    assert out.max() == reference.max()  # 1 / (1 - p) rounded once, to bf16
