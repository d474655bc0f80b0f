"""bench/step_profile.py: speed rows train on real text's ids, and their time is categorised."""

import torch

from bench.step_profile import CATEGORIES, category, corpus_tokens, profile_step, uniform_tokens

WT103_HEAD = 20_000  # wt103_base's and large's first cutoff


def test_corpus_targets_fall_in_the_head_cluster_as_real_text_does(shared_data):
    corpus = corpus_tokens(shared_data / "wikitext-103", 267_735, rows=8, length=385)
    uniform = uniform_tokens(267_735, rows=8, length=385)
    assert corpus.shape == uniform.shape == (8, 385)
    assert (corpus < WT103_HEAD).float().mean() > 0.9  # most of real text is frequent words
    assert (uniform < WT103_HEAD).float().mean() < 0.2
    assert len({tuple(row[:20].tolist()) for row in corpus}) == 8  # rows from across the text


def test_kernel_and_operator_names_fall_in_their_categories():
    names = {
        "fmha_cutlassB_bf16_aligned_64x64_k64_dropout_sm80(PyTorchMemEffAttention::Attention": 1,
        "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel": 0,
        "void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>": 2,
        "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT": 2,
        "aten::_log_softmax": 3,
        "Memcpy DtoD (Device -> Device)": 4,
        "aten::index_add_": 5,
        "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add": 6,
    }
    assert {name: CATEGORIES.index(category(name)) for name in names} == names


def test_a_profiled_cpu_step_reports_its_busy_share_and_every_category():
    weight = torch.randn(256, 256, requires_grad=True)

    def step():
        torch.log_softmax(torch.randn(64, 256) @ weight, -1).sum().backward()

    busy, breakdown = profile_step(step, torch.device("cpu"))
    assert 0 < busy <= 1 and set(breakdown) == {*CATEGORIES, "idle"}
    assert breakdown["matrix products"] > 0 and breakdown["softmax / cross-entropy"] > 0
