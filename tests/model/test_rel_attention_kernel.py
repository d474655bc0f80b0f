"""The fused relative-attention kernel, in Triton's interpreter on CPU, equals position_bias +
attend, output and every gradient; its dropout keeps 1 - p of the probabilities, unbiased, with
the same mask in the backward as in the forward."""

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch

from tests import processes
from tests.conftest import REPO_ROOT
from txl_dist.model import TXLConfig, attention
from txl_dist.model import rel_attention_kernel as kernel
from txl_dist.model.attention import (
    RelMultiHeadAttention,
    attend,
    attention_bias,
    attention_mask,
    position_bias,
    position_product,
    relative_distances,
    sinusoid_encoding,
)

pytestmark = pytest.mark.skipif(
    kernel.triton is None, reason="triton is not installed (the dev extra installs it)"
)


@pytest.fixture(autouse=True)
def blocks(monkeypatch):
    """Tiles of 16 (the smallest tl.dot takes), so that small inputs span several blocks."""
    monkeypatch.setattr(kernel, "BLOCK_M", 16)
    monkeypatch.setattr(kernel, "BLOCK_N", 16)


def leaves(b, h, q_len, m_len, d, dtype=torch.float32):
    """query, key, value, r_key, u, v: the attention core's inputs, needing gradients."""
    k_len = q_len + m_len
    shapes = ((b, h, q_len, d), (b, h, k_len, d), (b, h, k_len, d), (h, d, k_len), (h, d), (h, d))
    return [torch.randn(*shape, dtype=dtype, requires_grad=True) for shape in shapes]


def today(inputs, mask, scale, dropatt=0.0):
    """The current path: the shifted position bias, then attention with it."""
    query, key, value, r_key, u, v = inputs
    bias = position_bias(query + v[:, None], r_key, mask, scale)
    return attend(query + u[:, None], key, value, bias, scale, dropatt)


def fused(inputs, mask, scale, dropatt=0.0):
    query, key, value, r_key, u, v = inputs
    table = position_product(query + v[:, None], r_key, scale)
    return kernel.rel_attention(query + u[:, None], key, value, table, mask, scale, dropatt)


def forward_and_grads(attention, inputs, grad, *args):
    for t in inputs:
        t.grad = None
    out = attention(inputs, *args)
    out.backward(grad)
    return [out.detach(), *(t.grad for t in inputs)]


@pytest.mark.parametrize(
    "q_len, m_len, d_head, mem_len, same_length, block_m, block_n",
    [
        (19, 0, 16, 19, False, 16, 16),  # the first segment: no memory
        # Q and D no multiple of a block (D 41: a CPU's); with M 17 the first query block's
        # last diagonal key (32) is alone in its key block
        (19, 17, 41, 17, False, 16, 16),
        (19, 13, 48, 7, True, 16, 16),  # same_length with mem_len < M: a lower bound too
        (21, 40, 48, 40, True, 32, 16),  # taller tiles than wide, a memory longer than Q
        (21, 40, 48, 40, False, 16, 32),  # and wider than tall
    ],
)
def test_kernel_equals_position_bias_and_attend_forward_and_backward(
    monkeypatch, q_len, m_len, d_head, mem_len, same_length, block_m, block_n
):
    """Output and the gradients of query, key, value, r_key, u and v, in float32 without
    dropout, against today's path (which test_attention.py checks against direct pairs)."""
    monkeypatch.setattr(kernel, "BLOCK_M", block_m)
    monkeypatch.setattr(kernel, "BLOCK_N", block_n)
    torch.manual_seed(0)
    inputs = leaves(2, 3, q_len, m_len, d_head)
    mask = attention_bias(q_len, m_len, mem_len, same_length, "cpu")
    scale = d_head**-0.5
    grad = torch.randn(2, 3, q_len, d_head)
    want = forward_and_grads(today, inputs, grad, mask, scale)
    got = forward_and_grads(fused, inputs, grad, mask, scale)
    for name, mine, theirs in zip(("out", "q", "k", "v", "r_key", "u", "v bias"), got, want):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5, msg=name)


def test_kernel_in_half_precision_is_within_its_rounding_of_float64():
    """float16 inputs: the casts, tile products and stores of the low-precision path a GPU runs
    (bf16 there; the interpreter's tl.dot multiplies bf16's bit patterns, triton-lang/triton
    #11584), against today's path in float64 on the same values."""
    torch.manual_seed(0)
    inputs = leaves(2, 2, 19, 13, 32, torch.float16)
    exact = [t.detach().double().requires_grad_() for t in inputs]
    mask = attention_bias(19, 13, 13, False, "cpu")
    grad = torch.randn(2, 2, 19, 32)
    got = forward_and_grads(fused, inputs, grad.half(), mask.half(), 32**-0.5)
    want = forward_and_grads(today, exact, grad.double(), mask.double(), 32**-0.5)
    assert got[0].dtype == torch.float16
    for mine, theirs in zip(got, want):
        torch.testing.assert_close(mine.double(), theirs, rtol=1e-2, atol=1e-2)


DROP = 0.2
DROP_SHAPE = dict(b=2, h=4, q_len=24, m_len=24, d=48)  # value = identity: d = K


@pytest.fixture
def wide_blocks(monkeypatch):
    """Tiles of 32: the dropout tests' statistics want more elements, the interpreter fewer
    tiles (its cost is per tile, not per element)."""
    monkeypatch.setattr(kernel, "BLOCK_M", 32)
    monkeypatch.setattr(kernel, "BLOCK_N", 32)


def dropout_inputs():
    """Inputs whose value is the identity, so the output is the (dropped out) probabilities."""
    torch.manual_seed(0)
    inputs = [t.detach() for t in leaves(**DROP_SHAPE)]
    inputs[2] = torch.eye(48).expand(2, 4, 48, 48)
    return inputs, attention_bias(24, 24, 24, False, "cpu"), 48**-0.5


def test_dropout_keeps_one_minus_p_scaled_to_stay_unbiased(wide_blocks):
    inputs, mask, scale = dropout_inputs()
    probs = fused(inputs, mask, scale)
    dropped = fused(inputs, mask, scale, DROP)
    visible = attention_mask(24, 24, 24, False, "cpu").expand_as(probs)
    kept = dropped != 0
    assert not kept[~visible].any()
    torch.testing.assert_close(dropped[kept], probs[kept] / (1 - DROP))
    n = int(visible.sum())
    rate, sigma = kept[visible].float().mean().item(), (DROP * (1 - DROP) / n) ** 0.5
    assert abs(rate - (1 - DROP)) < 4 * sigma, (rate, n)
    # Unbiased: each row of probabilities sums to 1 in expectation (~0.01 spread over 192 rows).
    assert abs(dropped.sum(-1).mean().item() - 1) < 0.04
    # Every (batch, head) and every call draws its own mask; a seed repeats it.
    assert (kept[0, 0] != kept[0, 1]).any() and (kept[0, 0] != kept[1, 0]).any()
    assert not torch.equal(kept, fused(inputs, mask, scale, DROP) != 0)
    torch.manual_seed(3)
    again = fused(inputs, mask, scale, DROP)
    torch.manual_seed(3)
    torch.testing.assert_close(fused(inputs, mask, scale, DROP), again, rtol=0, atol=0)


def test_backward_drops_out_with_the_forwards_mask(wide_blocks):
    """The mask read off one call (value = identity) is the mask of the next call on the same
    seed; with it, output and gradients equal the explicit computation's."""
    identity, mask, scale = dropout_inputs()
    torch.manual_seed(7)
    kept = fused(identity, mask, scale, DROP) != 0
    torch.manual_seed(0)
    inputs = leaves(**DROP_SHAPE)
    grad = torch.randn(2, 4, 24, 48)
    torch.manual_seed(7)
    got = forward_and_grads(fused, inputs, grad, mask, scale, DROP)

    def explicit(inputs, mask, scale):
        query, key, value, r_key, u, v = inputs
        bias = position_bias(query + v[:, None], r_key, mask, scale)
        probs = ((query + u[:, None]) @ key.transpose(-1, -2) * scale + bias).softmax(-1)
        return probs * kept / (1 - DROP) @ value

    want = forward_and_grads(explicit, inputs, grad, mask, scale)
    for name, mine, theirs in zip(("out", "q", "k", "v", "r_key", "u", "v bias"), got, want):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5, msg=name)


@pytest.fixture(scope="module", autouse=True)
def hopper_compile(tmp_path_factory) -> Iterator[subprocess.Popen]:
    """The child of test_kernels_compile_for_a_hopper_gpu, started with this module's first
    test: its compile (seconds of one core) runs beside the interpreted tests here."""
    script = f"from {__name__} import compile_for_hopper; compile_for_hopper()"
    cache = tmp_path_factory.mktemp("triton_cache")
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(cache)}
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with processes.process_group(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, **pipes
    ) as proc:
        yield proc


def test_kernels_compile_for_a_hopper_gpu(hopper_compile):
    """What only a compiler refuses (a global that is not a constexpr, mismatched types), found
    without a GPU: the kernels as a bf16 step with dropout launches them, compiled for sm_90
    down to the binary by triton's own ptxas, in a process of its own (in this one triton runs
    interpreted)."""
    _, stderr = hopper_compile.communicate(timeout=300)
    assert hopper_compile.returncode == 0, stderr[-3000:]


def compile_for_hopper():
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    meta = kernel._meta(torch.empty(1, 1, 1, 64, dtype=torch.bfloat16), 0.2)
    options = {"num_warps": meta.pop("num_warps")}
    for fn in (kernel._forward, kernel._backward_key_value, kernel._backward_query):
        signature = {param.name: argument_type(param) for param in fn.params}
        source = ASTSource(fn, signature, constexprs=meta)
        binary = kernel.triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
        assert binary.asm["cubin"]


def argument_type(param) -> str:
    """A kernel argument's type in a bf16 step: lower-case names and the lengths are int32
    (strides, sizes), the scalars float32, the rest pointers."""
    special = {"scale": "fp32", "p_drop": "fp32", "Seed": "*i64", "Lse": "*fp32", "Delta": "*fp32"}
    if param.is_constexpr:
        return "constexpr"
    if param.name in special:
        return special[param.name]
    if param.name[0].islower() or param.name in ("H", "Q_LEN", "K_LEN", "D"):
        return "i32"
    return "*bf16"


def test_switch_runs_the_layer_through_the_kernel_with_the_same_result(monkeypatch):
    """RelMultiHeadAttention with model.fused_kernel on (the CPU let in as a fused device) against
    off: output and every parameter's gradient, through the layer's transposed head views."""
    torch.manual_seed(0)
    config = TXLConfig(n_head=2, d_model=24, d_head=16, d_inner=32, mem_len=5, dropout=0.0)
    layers = [
        RelMultiHeadAttention(dataclasses.replace(config, fused_kernel=on)).eval()
        for on in (False, True)
    ]
    layers[1].load_state_dict(layers[0].state_dict())
    h, mem = torch.randn(2, 9, 24), torch.randn(2, 7, 24)
    u, v = (torch.randn(2, 16, requires_grad=True) for _ in range(2))
    pos_enc = sinusoid_encoding(relative_distances(16, -1, h.device), 24)
    mask = attention_bias(9, 7, config.mem_len, True, h.device)
    grad = torch.randn(2, 9, 24)
    calls = []
    monkeypatch.setattr(kernel.RelAttention, "apply", spy(kernel.RelAttention.apply, calls))
    results = []
    monkeypatch.setattr(attention, "FUSED_DEVICES", {"cpu"})
    for layer in layers:
        params = [*layer.parameters(), u, v]
        for p in params:
            p.grad = None
        out = layer(h, mem, pos_enc, u, v, mask)
        out.backward(grad)
        results.append([out.detach(), *(p.grad for p in params)])
    assert len(calls) == 1
    for mine, theirs in zip(*results):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)


def spy(fn, calls):
    def wrapped(*args):
        calls.append(args)
        return fn(*args)

    return wrapped
