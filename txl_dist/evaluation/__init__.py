"""Evaluation: a model scored on a split or a text, every token once, and what a score reads as.

Imported by the engine, the exports and the commands, never importing them (model, config,
data_pipeline and process only): a model, or what opens a split's streams, comes from the caller.

- scores.py: what a mean loss reads as (perplexity or bits per character);
- loop.py: the distributed evaluation loop, every token of a split scored exactly once;
- split.py: the training run's evaluation of a split, a mix's corpora one by one;
- records.py: an evaluation's metrics record and console line;
- context.py: sweep rows, the lengths a model can score with, effective context and RECL;
- sweep.py: memory and clamp length sweeps, the split read once;
- requests.py: what the harness model computes on a loaded model (txl_dist.harness.lm).
"""
