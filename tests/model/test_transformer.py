"""Language-model properties of TransformerXL: causality, recurrence, softmax, precision."""

import pytest
import torch

from txl_dist.model import TransformerXL, TXLConfig
from txl_dist.model.transformer import segment_constants


def small_config(**overrides) -> TXLConfig:
    values = dict(
        n_token=300,
        n_layer=2,
        n_head=2,
        d_model=16,
        d_head=8,
        d_inner=32,
        dropout=0.0,
        tgt_len=6,
        mem_len=6,
    )
    return TXLConfig(**{**values, **overrides})


def tokens(batch, length, n_token=300, seed=0):
    return torch.randint(0, n_token, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("pre_lnorm", [False, True])
def test_changing_token_t_changes_no_earlier_output(pre_lnorm):
    torch.manual_seed(0)
    model = TransformerXL(small_config(pre_lnorm=pre_lnorm)).eval()
    ids = tokens(2, 8)
    mems = model(tokens(2, 8, seed=1)).mems
    before = model(ids, mems=mems).log_probs
    t = 5
    changed = ids.clone()
    changed[:, t] = (changed[:, t] + 1) % 300
    after = model(changed, mems=mems).log_probs
    torch.testing.assert_close(after[:, :t], before[:, :t], rtol=0, atol=0)
    assert not torch.allclose(after[:, t:], before[:, t:])


@pytest.mark.parametrize("cutoffs,div_val", [([], 1), ([50, 150], 2)])
def test_segment_with_memory_equals_one_long_segment(cutoffs, div_val):
    torch.manual_seed(0)
    model = TransformerXL(small_config(mem_len=7, cutoffs=cutoffs, div_val=div_val)).eval()
    seg_a, seg_b = tokens(3, 7), tokens(3, 5, seed=1)
    mems = model(seg_a).mems
    assert mems[0].shape == (3, 7, 16)
    split = model(seg_b, mems=mems).log_probs
    joint = model(torch.cat([seg_a, seg_b], 1)).log_probs[:, 7:]
    torch.testing.assert_close(split, joint, atol=1e-5, rtol=1e-5)


def test_memory_keeps_last_mem_len_states_and_carries_no_gradient():
    torch.manual_seed(0)
    model = TransformerXL(small_config(mem_len=4, dropout=0.1)).train()
    out = model(tokens(2, 6), tokens(2, 6, seed=1))
    assert [m.shape for m in out.mems] == [(2, 4, 16)] * 2
    assert all(not m.requires_grad and m.grad_fn is None for m in out.mems)
    leaf_mems = [m.clone().requires_grad_(True) for m in out.mems]
    out2 = model(tokens(2, 6, seed=2), tokens(2, 6, seed=3), mems=out.mems)
    out2.loss.mean().backward()
    # Step 2's backward reached the parameters but could not reach step 1's graph.
    assert model.r_w_bias.grad is not None
    assert all(m.grad is None for m in leaf_mems)


@pytest.mark.parametrize(
    "cutoffs,div_val,d_embed",
    [([], 1, None), ([40, 120], 1, None), ([40, 120], 4, 16), ([40, 120], 1, 8)],
)
def test_adaptive_softmax_normalises_and_matches_nll(cutoffs, div_val, d_embed):
    torch.manual_seed(0)
    config = small_config(cutoffs=cutoffs, div_val=div_val, d_embed=d_embed)
    model = TransformerXL(config).eval()
    ids, targets = tokens(2, 6), tokens(2, 6, seed=1)
    log_probs = model(ids).log_probs
    assert log_probs.shape == (2, 6, 300)
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(2, 6), atol=1e-5, rtol=0)
    nll = model(ids, targets).loss
    torch.testing.assert_close(nll, -log_probs.gather(-1, targets[..., None]).squeeze(-1))


def test_tied_weights_and_projections_are_shared_tensors():
    config = small_config(cutoffs=[40, 120], div_val=2, tie_projs=[False, True, True])
    model = TransformerXL(config)
    for out_layer, emb_layer in zip(model.crit.out_layers, model.word_emb.emb_layers):
        assert out_layer.weight is emb_layer.weight
    assert model.crit.out_projs[0] is not model.word_emb.emb_projs[0]
    assert model.crit.out_projs[1] is model.word_emb.emb_projs[1]
    untied = TransformerXL(small_config(tie_weight=False))
    assert untied.crit.out_layers[0].weight is not untied.word_emb.emb_layers[0].weight


def test_bf16_autocast_forward_backward_with_div_val_4():
    torch.manual_seed(0)
    config = small_config(cutoffs=[40, 120], div_val=4, tie_projs=[False, True, True], dropout=0.1)
    model = TransformerXL(config).train()
    ids, targets = tokens(2, 6), tokens(2, 6, seed=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(ids, targets)
        out2 = model(ids, targets, mems=out.mems)
    loss = out2.loss.mean()
    loss.backward()
    assert out2.loss.dtype == torch.float32 and torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert model.word_emb.emb_projs[2].grad is not None


def test_lengths_apply_within_the_block_and_never_touch_the_callers_config():
    config = small_config(mem_len=4)
    model = TransformerXL(config).eval()
    with model.lengths(mem_len=9, same_length=True):
        mems = model(tokens(1, 6)).mems
        assert mems[0].shape == (1, 6, 16) and model.config.mem_len == 9
    assert (model.config.mem_len, model.config.same_length) == (4, False)
    model.set_lengths(mem_len=7)
    assert config.mem_len == 4 and model(tokens(1, 6)).mems[0].shape == (1, 6, 16)


def test_set_lengths_changes_context_at_eval_time():
    model = TransformerXL(small_config(mem_len=4)).eval()
    model.set_lengths(mem_len=9, same_length=True, clamp_len=3)
    mems = model(tokens(1, 6)).mems
    mems = model(tokens(1, 6, seed=1), mems=mems).mems
    assert mems[0].shape == (1, 9, 16)
    assert model.config.same_length and model.config.clamp_len == 3


def test_segment_constants_are_made_once_per_lengths_and_change_no_loss():
    """Masks and position encodings are reused across steps of the same lengths; training
    with them gives the losses and gradients of making them afresh each step."""
    config = small_config(dropout=0.0, mem_len=4)  # no dropout: pos_enc itself is saved

    def train(fresh_each_step: bool) -> tuple[list[float], list[torch.Tensor]]:
        torch.manual_seed(0)
        model = TransformerXL(config).train()
        losses, mems = [], None
        for step in range(3):
            if fresh_each_step:
                segment_constants.cache_clear()
            out = model(tokens(2, 6, seed=step), tokens(2, 6, seed=10 + step), mems)
            out.loss.mean().backward()
            losses.append(out.loss.mean().item())
            mems = out.mems
        return losses, [p.grad for p in model.parameters()]

    segment_constants.cache_clear()
    with torch.inference_mode():  # an evaluation makes them first: still usable in training
        TransformerXL(config).eval()(tokens(2, 6))
        TransformerXL(config).eval()(tokens(2, 6), mems=[torch.zeros(2, 4, 16)] * 2)
    reused, reused_grads = train(fresh_each_step=False)
    info = segment_constants.cache_info()
    assert (info.misses, info.hits) == (2, 3)  # no memory, then mem_len 4: made once each
    fresh, fresh_grads = train(fresh_each_step=True)
    assert reused == fresh
    for a, b in zip(reused_grads, fresh_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_initial_weights_come_from_the_cpu_generator_wherever_the_parameters_live():
    """ZeRO-3 builds on the GPU, the other stages on the CPU: the draws must be the CPU's in
    both. Here the parameters live on the meta device; the CPU generator must move exactly as
    when they live on the CPU."""
    config = TXLConfig(n_token=50, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=32)
    after = []
    for device in ("cpu", "meta"):
        with torch.device(device):
            model = TransformerXL(config, init_weights=False)
        torch.manual_seed(0)
        model.init_weights()
        after.append(torch.randn(3))
    torch.testing.assert_close(after[0], after[1], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # bf16 takes the SDPA path
def test_a_step_given_host_cluster_sizes_makes_no_host_sync(dtype):
    """Forward with memory and backward under fake tensors, which have no values: any .item(),
    .tolist(), nonzero or shape that depends on the data raises there. Counting the clusters
    on the device (no sizes given) is such an op, so the test sees one when there is one."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        FakeTensorMode,
    )

    config = TXLConfig(
        n_token=100, cutoffs=[20, 50], div_val=2, n_layer=2, n_head=2, d_model=16, d_head=8,
        d_inner=32, tgt_len=5, mem_len=5, dropout=0.1, dropatt=0.1,
    )  # fmt: skip
    model = TransformerXL(config).to(dtype).train()
    ids = torch.randint(0, 100, (2, 6))
    sizes = model.cluster_sizes(ids[:, 1:])

    def two_segments(sizes):
        with FakeTensorMode(allow_non_fake_inputs=True):
            out = model(ids[:, :-1], ids[:, 1:], None, cluster_sizes=sizes)
            out = model(ids[:, :-1], ids[:, 1:], out.mems, cluster_sizes=sizes)
            out.loss.float().mean().backward()

    two_segments(sizes)
    with pytest.raises((DataDependentOutputException, DynamicOutputShapeException)):
        two_segments(None)


def test_host_cluster_sizes_give_the_nll_of_device_ones():
    config = TXLConfig(n_token=100, cutoffs=[20, 50], n_layer=1, d_model=16, d_head=4)
    model = TransformerXL(config).eval()
    ids, targets = torch.randint(0, 100, (3, 8)), torch.randint(0, 100, (3, 8))
    targets[0, 4] = -100  # an ignored target: its own group
    want = model(ids, targets).loss
    got = model(ids, targets, cluster_sizes=model.cluster_sizes(targets)).loss
    assert torch.equal(got, want)
