"""Our exported models in EleutherAI's lm-evaluation-harness (needs the `harness` extra).

`TXLM` is the harness's `LM`, registered as model "txl"; `txl-eval --tasks` runs it through the
harness's own evaluator (txl_dist.harness.tasks).

lm.py: `TXLM`; tasks.py: `txl-eval --tasks`; trust.py: what task files may run; sandbox.py: the
bound on what a template may build.
"""

from txl_dist.harness.lm import TXLM

__all__ = ["TXLM"]
