"""A bf16 update whose gradients are not finite is skipped and counted at every ZeRO stage, on
the gradient norm where DeepSpeed's per-gradient check is off (ZeRO-1/2)."""

import json
import os
import sys

import pytest

from tests import processes
from tests.conftest import REPO_ROOT

POISONED_STEP = """
import contextlib, json, sys, torch
from torch.utils._python_dispatch import TorchDispatchMode
from txl_dist.config.loading import load_run_config
from txl_dist.engine.build import build_model
from txl_dist.engine.deepspeed_setup import build_optimizer, deepspeed_config, initialize_engine
from txl_dist.process.dist import World, end_distributed, init_distributed


class Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def inf_in_one_element(grad):
    grad = grad.clone()
    grad.view(-1)[7] = float("inf")
    return grad


def states(engine):
    # The bf16 weights (a rank's partition under ZeRO-3), the fp32 master weights and Adam's
    # moments and step count.
    tensors = [getattr(p, "ds_tensor", p) for p in engine.module.parameters()]
    base = engine.basic_optimizer
    for group in base.param_groups:
        for p in group["params"]:
            tensors += [p, *base.state[p].values()]
    return [t.detach().clone() for t in tensors]


init_distributed(World(0, 1, 0))
ids = torch.randint(0, 2000, (2, 3, 17), generator=torch.Generator().manual_seed(0))
results = []
for stage, *settings in json.loads(sys.argv[1]):
    config = load_run_config(
        "configs/tiny.json", [f"deepspeed.zero_optimization.stage={stage}", *settings]
    )
    ds_config = deepspeed_config(config, config.plan(1), load_universal=False)
    model = build_model(config, ds_config)
    engine, _ = initialize_engine(model, build_optimizer(model, config), None, ds_config)
    weight = dict(engine.module.named_parameters())["layers.0.pos_ff.CoreNet.0.weight"]
    changed, ops = [], Ops()
    for i, batch in enumerate(ids.unbind(1)):
        before = states(engine)
        hook = weight.register_hook(inf_in_one_element) if i == 1 else None
        loss = engine(batch[:, :-1], batch[:, 1:]).loss.float().mean()
        engine.backward(loss)
        with ops if i == 1 else contextlib.nullcontext():
            engine.step()
        if hook is not None:
            hook.remove()
        changed.append([not torch.equal(a, b) for a, b in zip(before, states(engine))])
        finite = all(bool(torch.isfinite(t).all()) for t in states(engine))
    results.append(dict(
        optimizer=type(engine.optimizer).__name__,
        changed=[sum(c) for c in changed],
        skipped=engine.skipped_steps,
        finite=finite,
        per_gradient_checks=ops.names.count("amax"),
    ))
print("RESULT " + json.dumps(results))
end_distributed()
"""

SETTINGS = [
    "model.n_token=2000",
    "model.cutoffs=[1000]",
    "model.tie_projs=[false,true]",
    "train.global_rows=2",
    "model.dropout=0.0",
    "data.path=unused",
]


@pytest.fixture(scope="module")
def poisoned() -> dict:
    """Per ZeRO stage in bf16 on one rank: three updates, an inf in one element of one
    gradient in the second; what each changed and what the engine counted."""
    runs = {
        "0": [0],
        "1": [1],
        "2": [2],
        "3": [3],
        "2-deepspeed-check": [2, "train.norm_overflow_check=false"],
    }
    settings = [*SETTINGS, "deepspeed.bf16.enabled=true"]
    stages = [[stage, *settings, *more] for stage, *more in runs.values()]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_PORT")}
    proc = processes.run(
        [sys.executable, "-c", POISONED_STEP, json.dumps(stages)],
        timeout=600,
        cwd=REPO_ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(zip(runs, json.loads(proc.stdout.split("RESULT ")[1])))


@pytest.mark.parametrize("stage", ["0", "1", "2", "3", "2-deepspeed-check"])
def test_an_update_with_an_inf_gradient_changes_nothing_and_is_counted(poisoned, stage):
    result = poisoned[stage]
    # The first and third updates change the weights and moments; the second changes none.
    first, second, third = result["changed"]
    assert first > 0 and second == 0 and third > 0, result
    assert result["skipped"] == 1 and result["finite"], result


def test_zero1_and_2_check_the_norm_alone_unless_told_otherwise(poisoned):
    for stage in ("1", "2"):
        assert poisoned[stage]["optimizer"] == "DeepSpeedZeroOptimizer"
        assert poisoned[stage]["per_gradient_checks"] == 0, poisoned[stage]
    # DeepSpeed's own check: a max and a min of every gradient
    assert poisoned["2-deepspeed-check"]["per_gradient_checks"] > 50
