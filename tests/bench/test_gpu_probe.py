"""bench/gpu_probe.py runs on a CPU at tiny shapes, so that it never rots between GPU runs."""

import torch

from bench import gpu_probe


def test_every_probe_reports_a_time_or_why_not(monkeypatch):
    monkeypatch.setattr(gpu_probe, "SMOKE", True)
    monkeypatch.setattr(gpu_probe, "RESULTS", {})
    gpu_probe.gemm(torch.device("cpu"))
    gpu_probe.attention(torch.device("cpu"))
    results = gpu_probe.RESULTS
    assert sum(key.startswith("gemm") for key in results) == 2
    today = results["attention mem-eff (today), dropatt 0"]
    assert today["ms"] > 0 and today["grad_cos_min"] > 0.9999
    assert "backward on CPU" in results["attention flex, clamped unshifted table"]["error"]
    assert results["attention triton fused kernel (ours), dropatt 0"]["grad_cos_min"] > 0.9999
    assert all("ms" in r or "error" in r for k, r in results.items() if k.startswith("attention"))
