"""Relative attention equals a direct computation that builds R_{i-j} for every (i, j) pair."""

import dataclasses

import pytest
import torch

from txl_dist.model import TXLConfig, attention, rel_attention_kernel
from txl_dist.model.attention import (
    RelMultiHeadAttention,
    ShiftedBias,
    attend,
    attention_bias,
    attention_core,
    attention_mask,
    position_bias,
    rel_shift,
    relative_distances,
    sinusoid_encoding,
)


def direct_attention(attn, h, mem, r_w_bias, r_r_bias, clamp_len, mem_len, same_length):
    """Scores from explicit per-pair relative encodings: no shift trick, no SDPA."""
    b, q_len, d_model = h.shape
    m_len = mem.size(1)
    n_head, d_head = attn.n_head, attn.d_head
    context = torch.cat([mem, h], 1)
    w_q, w_k, w_v = attn.qkv_net.weight.chunk(3)
    q = (context[:, -q_len:] @ w_q.t()).view(b, q_len, n_head, d_head)
    k = (context @ w_k.t()).view(b, m_len + q_len, n_head, d_head)
    v = (context @ w_v.t()).view(b, m_len + q_len, n_head, d_head)
    scores = torch.full((b, n_head, q_len, m_len + q_len), float("-inf"))
    for i in range(q_len):
        for j in range(m_len + q_len):
            distance = m_len + i - j
            if distance < 0 or (same_length and distance >= mem_len):
                continue
            if clamp_len > 0:
                distance = min(distance, clamp_len)
            r = sinusoid_encoding(torch.tensor([float(distance)]), d_model)  # [1, d_model]
            r_k = (r @ attn.r_net.weight.t()).view(n_head, d_head)
            ac = ((q[:, i] + r_w_bias) * k[:, j]).sum(-1)  # [B, H]
            bd = ((q[:, i] + r_r_bias) * r_k).sum(-1)  # [B, H]
            scores[:, :, i, j] = (ac + bd) * attn.scale
    probs = scores.softmax(-1)
    out = torch.einsum("bhij,bjhd->bihd", probs, v).reshape(b, q_len, n_head * d_head)
    return attn.layer_norm(h + attn.o_net(out))


@pytest.mark.parametrize("clamp_len", [-1, 3])
@pytest.mark.parametrize("same_length", [False, True])
@pytest.mark.parametrize("m_len", [0, 5])
def test_rel_shift_attention_equals_direct_pairs(clamp_len, same_length, m_len):
    torch.manual_seed(0)
    config = TXLConfig(n_head=3, d_model=12, d_head=4, d_inner=16, dropout=0.0, mem_len=6)
    attn = RelMultiHeadAttention(config).eval()
    for p in attn.parameters():
        torch.nn.init.normal_(p, 0.0, 0.5)
    h, mem = torch.randn(2, 4, 12), torch.randn(2, m_len, 12)
    u, v = torch.randn(3, 4), torch.randn(3, 4)
    k_len = m_len + 4
    pos_enc = sinusoid_encoding(relative_distances(k_len, clamp_len, h.device), 12)
    mask = attention_bias(4, m_len, config.mem_len, same_length, h.device)

    got = attn(h, mem, pos_enc, u, v, mask)
    want = direct_attention(attn, h, mem, u, v, clamp_len, config.mem_len, same_length)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("extra", [0, 5])
def test_rel_shift_moves_each_row_by_its_distance_as_a_view(extra):
    """Rows padded with a zero slot in front and `extra` slots behind (an aligned width)."""
    q_len, k_len = 3, 7
    scores = torch.arange(q_len * k_len, dtype=torch.float).view(1, 1, q_len, k_len) + 1
    padded = torch.nn.functional.pad(scores, (1, extra))
    shifted = rel_shift(padded, k_len)
    assert shifted.shape == scores.shape
    m_len = k_len - q_len
    for i in range(q_len):
        for j in range(m_len + i + 1):
            assert shifted[0, 0, i, j] == scores[0, 0, i, j + q_len - 1 - i]
    assert shifted.untyped_storage().data_ptr() == padded.untyped_storage().data_ptr()


def test_same_length_gives_every_query_mem_len_keys():
    allowed = attention_mask(q_len=4, m_len=6, mem_len=6, same_length=True, device="cpu")
    assert allowed.sum(-1).tolist() == [6, 6, 6, 6]
    causal = attention_mask(q_len=4, m_len=6, mem_len=6, same_length=False, device="cpu")
    assert causal.sum(-1).tolist() == [7, 8, 9, 10]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m_len", [0, 7, 11])
def test_position_bias_is_the_scaled_shifted_product_masked_forward_and_backward(dtype, m_len):
    """position_bias (batch folded into one product per head, rows padded to an aligned width,
    its own shift backward) against the definition: the product, then the pad-and-copy shift,
    scaled, masked; gradients too. K + 1 = 6, 13 and 17 columns pad to 8, 16 and 24."""
    torch.manual_seed(0)
    q_len, scale = 5, 32**-0.5
    k_len = q_len + m_len
    allowed = attention_mask(q_len, m_len, 4, True, "cpu")
    query, r_key = torch.randn(2, 3, q_len, 32, dtype=dtype), torch.randn(3, 32, k_len, dtype=dtype)
    grad = torch.randn(2, 3, q_len, k_len, dtype=dtype).masked_fill(~allowed, 0)
    fused = [t.clone().requires_grad_() for t in (query, r_key)]
    plain = [t.clone().double().requires_grad_() for t in (query, r_key)]
    got = position_bias(*fused, attention_bias(q_len, m_len, 4, True, "cpu", dtype), scale)
    padded = torch.nn.functional.pad(torch.matmul(*plain), (1, 0))
    shifted = padded.view(2, 3, k_len + 1, q_len)[:, :, 1:].reshape(2, 3, q_len, k_len)
    want = (shifted * scale).masked_fill(~allowed, float("-inf"))
    got.backward(grad)
    want.backward(grad.double())
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=5e-2)
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), want, **tolerance)
    for mine, theirs in zip(fused, plain):
        torch.testing.assert_close(mine.grad.double(), theirs.grad, **tolerance)


@pytest.mark.parametrize("width", [8, 16])
def test_shifted_bias_backward_is_the_gradient_of_its_forward(width):
    """ShiftedBias's hand-written backward (each element written once, unread slots zero)
    against finite differences, through the realigned entries and the masked ones."""
    torch.manual_seed(0)
    q_len, k_len = 3, 7
    padded = torch.randn(2, 3, q_len, width, dtype=torch.float64, requires_grad=True)
    mask = torch.randn(q_len, k_len, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: ShiftedBias.apply(t, mask), (padded,))


def attention_inputs():
    torch.manual_seed(0)
    q_len, m_len, scale = 6, 5, 8**-0.5
    query = torch.randn(2, 3, q_len, 8)
    key, value = (torch.randn(2, 3, m_len + q_len, 8) for _ in range(2))
    scores = torch.randn(2, 3, q_len, m_len + q_len)
    bias = scores * scale + attention_bias(q_len, m_len, 4, True, "cpu")
    return [t.requires_grad_() for t in (query, key, value, bias)], scale


def test_attend_equals_scaled_dot_product_attention_forward_and_backward():
    """Float32 CPU attention is our own baddbmm path: it must be SDPA's math, gradients of the
    position bias included, under the same-length mask. (Other dtypes call SDPA itself.)"""
    inputs, scale = attention_inputs()
    assert_sdpa_forward_and_backward(lambda *t: attend(*t, scale, 0.0), inputs, scale, 1e-6)


def assert_sdpa_forward_and_backward(attention, inputs, scale, tolerance):
    """attention(query, key, value, bias) equals SDPA on copies, gradients of all four too."""
    twins = [t.detach().clone().requires_grad_() for t in inputs]
    got = attention(*inputs)
    want = torch.nn.functional.scaled_dot_product_attention(
        *twins[:3], attn_mask=twins[3], scale=scale
    )
    grad = torch.randn_like(got)
    got.backward(grad)
    want.backward(grad)
    torch.testing.assert_close(got, want, atol=tolerance, rtol=10 * tolerance)
    for mine, theirs in zip(inputs, twins):
        torch.testing.assert_close(mine.grad, theirs.grad, atol=tolerance, rtol=10 * tolerance)


def test_attention_dropout_drops_probabilities_and_scales_the_rest():
    inputs, scale = attention_inputs()
    query, key, bias = (t.detach() for t in (inputs[0], inputs[1], inputs[3]))
    identity = torch.eye(key.size(2)).expand(2, 3, -1, -1)  # value rows = one-hot: out = probs
    probs = attend(query, key, identity, bias, scale, 0.0)
    torch.manual_seed(1)
    dropped = attend(query, key, identity, bias, scale, 0.5)
    assert ((dropped == 0) & (probs > 0)).any()
    torch.testing.assert_close(dropped[dropped != 0], probs[dropped != 0] * 2)


def test_fused_kernel_is_taken_only_when_switched_on_and_on_its_devices(monkeypatch):
    """The CPU is no fused device: with model.fused_kernel on, today's path; let in, the kernel
    (tests/model/test_rel_attention_kernel.py checks what it computes)."""

    def kernel(*args):
        raise NotImplementedError("the fused kernel")

    monkeypatch.setattr(rel_attention_kernel, "rel_attention", kernel)
    (query, key, value, _), scale = attention_inputs()
    r_key, u, v = torch.randn(3, 8, 11), torch.randn(3, 8), torch.randn(3, 8)
    mask = attention_bias(6, 5, 4, True, "cpu")
    want = attend(
        query + u[:, None],
        key,
        value,
        position_bias(query + v[:, None], r_key, mask, scale),
        scale,
        0.0,
    )
    for switch, devices in ((False, {"cpu"}), (True, {"cuda"})):
        monkeypatch.setattr(attention, "FUSED_DEVICES", devices)
        got = attention_core(query, key, value, r_key, u, v, mask, scale, 0.0, fused=switch)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    monkeypatch.setattr(attention, "FUSED_DEVICES", {"cpu"})
    with pytest.raises(NotImplementedError, match="fused kernel"):
        attention_core(query, key, value, r_key, u, v, mask, scale, 0.0, fused=True)


def test_compiled_attention_core_equals_eager_forward_and_backward():
    """train.compile traces ShiftedBias and attend: the compiled core computes what eager does,
    gradients of every input too. (Inductor once mistook the layout of ShiftedBias's output.)"""
    (query, key, value, _), scale = attention_inputs()
    r_key, u, v = (
        torch.randn(*shape, requires_grad=True) for shape in ((3, 8, 11), (3, 8), (3, 8))
    )
    mask = attention_bias(6, 5, 4, True, "cpu")
    inputs = [query, key, value, r_key, u, v]
    twins = [t.detach().clone().requires_grad_() for t in inputs]
    core = lambda *t: attention_core(*t, mask, scale, 0.0)  # noqa: E731
    got, want = torch.compile(core)(*inputs), core(*twins)
    grad = torch.randn_like(got)
    got.backward(grad)
    want.backward(grad)
    torch.testing.assert_close(got, want)
    for mine, theirs in zip(inputs, twins):
        torch.testing.assert_close(mine.grad, theirs.grad)


@pytest.mark.parametrize("row_multiple,width", [(8, 16), (1, 13), (5, 15)])
def test_the_position_product_s_rows_pad_to_the_config_s_multiple(monkeypatch, row_multiple, width):
    """model.position_row_multiple reaches the product: K + 1 = 13 columns padded to its
    multiple (1: as many as there are), the layer's output the same at every multiple."""
    torch.manual_seed(0)
    config = TXLConfig(n_head=2, d_model=16, d_head=8, mem_len=7, dropout=0.0)
    layer = RelMultiHeadAttention(dataclasses.replace(config, position_row_multiple=row_multiple))
    plain = RelMultiHeadAttention(config)
    plain.load_state_dict(layer.state_dict())
    widths = []
    apply = attention.ShiftedBias.apply
    monkeypatch.setattr(
        attention.ShiftedBias, "apply", lambda p, m: widths.append(p.size(-1)) or apply(p, m)
    )
    h, mem = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    u, v = torch.randn(2, 8), torch.randn(2, 8)
    pos_enc = sinusoid_encoding(relative_distances(12, -1, h.device), 16)
    mask = attention_bias(5, 7, 7, False, h.device)
    got = layer.eval()(h, mem, pos_enc, u, v, mask)
    torch.testing.assert_close(got, plain.eval()(h, mem, pos_enc, u, v, mask))
    assert widths == [width, 16]
