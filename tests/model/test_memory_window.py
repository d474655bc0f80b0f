"""The memory window over several segments, with memories shorter and longer than the segment.

After each segment, layer l's memory must be the last mem_len of [its old memory; the states
that entered layer l in this segment]; a query then sees exactly the tokens of that window, so
its log-probs equal a run without memory over the window itself.
"""

from __future__ import annotations

import pytest
import torch

from txl_dist.model import TransformerXL, TXLConfig

SEGMENTS = 4
BATCH = 2


def model_with(n_layer: int, tgt_len: int, mem_len: int) -> TransformerXL:
    torch.manual_seed(0)
    config = TXLConfig(
        n_token=97, n_layer=n_layer, n_head=2, d_model=16, d_head=8, d_inner=32, dropout=0.0,
        tgt_len=tgt_len, mem_len=mem_len,
    )  # fmt: skip
    return TransformerXL(config).eval()


def stream(length: int) -> torch.Tensor:
    return torch.randint(0, 97, (BATCH, length), generator=torch.Generator().manual_seed(1))


def run_recording_layer_inputs(model, ids, mems=None):
    """(output, [the hidden states that entered each layer])."""
    inputs = []
    hooks = [
        layer.register_forward_pre_hook(lambda _, args: inputs.append(args[0]))
        for layer in model.layers
    ]
    try:
        return model(ids, mems=mems), inputs
    finally:
        for hook in hooks:
            hook.remove()


@pytest.mark.parametrize("tgt_len,mem_len", [(6, 4), (4, 10)], ids=["shorter", "longer"])
def test_memory_holds_the_last_mem_len_states_of_old_memory_and_segment(tgt_len, mem_len):
    model = model_with(n_layer=3, tgt_len=tgt_len, mem_len=mem_len)
    ids = stream(SEGMENTS * tgt_len)
    embeddings = model.word_emb(ids)  # what enters layer 0: independent of the context
    mems = None
    for s in range(SEGMENTS):
        end = (s + 1) * tgt_len
        out, inputs = run_recording_layer_inputs(model, ids[:, end - tgt_len : end], mems)
        kept = min(mem_len, end)
        for layer, (new, entered) in enumerate(zip(out.mems, inputs)):
            old = mems[layer] if mems is not None else entered[:, :0]
            expected = torch.cat([old, entered], dim=1)[:, -mem_len:]
            assert new.shape == (BATCH, kept, 16), (s, layer)
            assert torch.equal(new, expected), (s, layer)
        torch.testing.assert_close(out.mems[0], embeddings[:, end - kept : end], rtol=0, atol=0)
        mems = out.mems


@pytest.mark.parametrize("tgt_len,mem_len", [(6, 4), (4, 10)], ids=["shorter", "longer"])
def test_one_layer_log_probs_equal_a_run_over_the_window(tgt_len, mem_len):
    # With one layer the memory is token embeddings, so the window is exactly mem_len tokens
    # before the segment, and a run without memory over [window; segment] sees the same keys.
    model = model_with(n_layer=1, tgt_len=tgt_len, mem_len=mem_len)
    ids = stream(SEGMENTS * tgt_len)
    mems = None
    for s in range(SEGMENTS):
        start, end = s * tgt_len, (s + 1) * tgt_len
        out = model(ids[:, start:end], mems=mems)
        window = model(ids[:, max(0, start - mem_len) : end]).log_probs[:, -tgt_len:]
        torch.testing.assert_close(out.log_probs, window, rtol=1e-5, atol=1e-5)
        mems = out.mems


def test_deep_model_with_memory_of_the_whole_past_equals_one_full_context_run():
    # Memory never drops a state here, so every layer's memory is the full-context run's input
    # to that layer for the same positions, and the log-probs of each segment agree.
    tgt_len = 4
    mem_len = (SEGMENTS - 1) * tgt_len
    model = model_with(n_layer=3, tgt_len=tgt_len, mem_len=mem_len)
    ids = stream(SEGMENTS * tgt_len)
    full, full_inputs = run_recording_layer_inputs(model, ids)
    mems = None
    for s in range(SEGMENTS):
        start, end = s * tgt_len, (s + 1) * tgt_len
        out = model(ids[:, start:end], mems=mems)
        torch.testing.assert_close(
            out.log_probs, full.log_probs[:, start:end], rtol=1e-5, atol=1e-5
        )
        for layer in range(3):
            torch.testing.assert_close(
                out.mems[layer], full_inputs[layer][:, max(0, end - mem_len) : end],
                rtol=1e-5, atol=1e-5,
            )  # fmt: skip
        mems = out.mems
