"""DeepSpeed's setup: fitted buckets, the fp32 ZeRO-0 engine's step as plain torch's, one rank's
stage."""

import json
import os
import sys

import pytest

from tests import processes
from tests.conftest import REPO_ROOT
from txl_dist.config.loading import load_run_config
from txl_dist.engine.deepspeed_setup import deepspeed_config
from txl_dist.model import TransformerXL

SETTINGS = ["model.n_token=12000", "train.seed=7"]


def test_fitted_buckets_hold_the_largest_gradient_where_the_config_sets_none():
    config = load_run_config(
        str(REPO_ROOT / "configs/tiny.json"),
        [
            *SETTINGS,
            "train.fit_buckets=true",
            "deepspeed.zero_optimization.allgather_bucket_size=8",
        ],
    )
    largest = max(p.numel() for p in TransformerXL(config.model).parameters())
    zero = deepspeed_config(config, config.plan(2), load_universal=False)["zero_optimization"]
    assert largest == 8000 * 64 and zero["reduce_bucket_size"] == largest
    assert zero["allgather_bucket_size"] == 8  # set by the config
    unfitted = load_run_config(str(REPO_ROOT / "configs/tiny.json"), SETTINGS)
    assert "reduce_bucket_size" not in deepspeed_config(unfitted, unfitted.plan(2), False)


# Both tests' engines in one process: one start-up (imports, process group) instead of two.
ONE_RANK_ENGINES = """
import json, sys, torch, torch.distributed as dist
from deepspeed.accelerator import get_accelerator
from txl_dist.config.loading import load_run_config
from txl_dist.engine.build import build_model
from txl_dist.engine.deepspeed_setup import build_optimizer, deepspeed_config, initialize_engine
from txl_dist.process.dist import World, end_distributed, init_distributed

COLLECTIVES = (
    "all_gather", "all_gather_coalesced", "all_gather_into_tensor", "all_gather_object",
    "all_reduce", "all_reduce_coalesced", "all_to_all", "all_to_all_single", "barrier",
    "batch_isend_irecv", "broadcast", "broadcast_object_list", "gather", "gather_object",
    "irecv", "isend", "monitored_barrier", "recv", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "scatter", "scatter_object_list", "send",
)
collectives = []

def counted(name, call):
    return lambda *args, **kwargs: collectives.append(name) or call(*args, **kwargs)

# Before the process group: DeepSpeed's backend keeps references to some of these. One rank
# never takes the shared-memory kernel (process.shm_collectives needs two).
for module in (dist, dist.distributed_c10d):
    for name in COLLECTIVES:
        setattr(module, name, counted(name, getattr(module, name)))
accelerator, synchronized = get_accelerator(), []
synchronize = accelerator.synchronize
accelerator.synchronize = lambda *args: synchronized.append(1) or synchronize(*args)
init_distributed(World(0, 1, 0))


def fp32_zero0_steps(settings):
    config = load_run_config("configs/tiny.json", settings)
    ds_config = deepspeed_config(config, config.plan(1), load_universal=False)
    model, plain = build_model(config, ds_config), build_model(config, ds_config)
    engine, _ = initialize_engine(model, build_optimizer(model, config), None, ds_config)
    optimizer = build_optimizer(plain, config)
    collectives.clear()  # those of the set-up
    n_token = config.model.n_token
    ids = torch.randint(0, n_token, (4, 3, 17), generator=torch.Generator().manual_seed(0))
    clip, norms = config.ds.gradient_clipping, []
    for batch in ids.unbind(1):
        engine.backward(engine(batch[:, :-1], batch[:, 1:]).loss.float().mean())
        engine.step()
        plain(batch[:, :-1], batch[:, 1:]).loss.float().mean().backward()
        norms.append(torch.nn.utils.clip_grad_norm_(plain.parameters(), clip, foreach=False).item())
        optimizer.step()
        optimizer.zero_grad()
    diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(), plain.parameters()))
    return dict(norms=norms, diff=diff, collectives=list(collectives))


def one_rank_stages(settings):
    ids = torch.randint(0, 12000, (4, 3, 17), generator=torch.Generator().manual_seed(0))
    results = {}
    for precision in ("bf16", "fp32"):
        bf16 = [f"deepspeed.bf16.enabled={json.dumps(precision == 'bf16')}"]
        configured = load_run_config("configs/tiny.json", [*settings, *bf16])
        runs = {}
        for name, config in (("configured", configured), ("one rank", configured.at_world_size(1))):
            ds_config = deepspeed_config(config, config.plan(1), load_universal=False)
            model = build_model(config, ds_config)
            engine, _ = initialize_engine(model, build_optimizer(model, config), None, ds_config)
            losses, mems = [], [None, None]
            synchronized.clear()
            for batch in ids.unbind(1):  # 3 updates of 2 micro batches
                for slot in (0, 1):
                    rows = batch[2 * slot : 2 * slot + 2]
                    out = engine(rows[:, :-1], rows[:, 1:], mems[slot])
                    loss = out.loss.float().mean()
                    engine.backward(loss)
                    engine.step()
                    losses.append(loss.item())
                    mems[slot] = out.mems
            weights = [p.detach().float() for p in engine.module.parameters()]
            kind, stage = type(engine.optimizer).__name__, config.zero_stage
            runs[name] = (stage, kind, losses, weights, len(synchronized))
        (stage, _, losses, weights, _), (one_stage, optimizer, one_losses, one_weights, syncs) = (
            runs.values()
        )
        results[precision] = dict(
            stages=[stage, one_stage],
            optimizer=optimizer,
            same_losses=losses == one_losses,
            max_weight_difference=max(
                (a - b).abs().max().item() for a, b in zip(weights, one_weights)
            ),
            device_synchronizations=syncs,
        )
    return results


fp32, stages = (json.loads(arg) for arg in sys.argv[1:])
result = dict(fp32=fp32_zero0_steps(fp32), stages=one_rank_stages(stages))
result["compiler_loaded"] = "torch._inductor.compile_fx" in sys.modules  # torch.compile's back end
print("RESULT " + json.dumps(result))
end_distributed()
"""

FP32_ZERO0 = [
    *SETTINGS,
    "model.dropout=0.0",
    "train.global_rows=4",
    "deepspeed.zero_optimization.stage=0",
    "deepspeed.bf16.enabled=false",
]
# A ZeRO-2 config with DeepSpeed's gradient buckets (as wt103_base).
ZERO2_BUCKETS = [
    *SETTINGS,
    "model.dropout=0.0",
    "train.global_rows=4",
    "train.max_micro_rows=2",
    "deepspeed.zero_optimization.contiguous_gradients=true",
]


@pytest.fixture(scope="module")
def one_rank() -> dict:
    """What the engines of one process (no launcher's rank variables) did, from the repository
    root: {"fp32": the ZeRO-0 steps, "stages": the ZeRO-2 config as one rank runs it}."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_PORT")}
    settings = [json.dumps(FP32_ZERO0), json.dumps(ZERO2_BUCKETS)]
    proc = processes.run(
        [sys.executable, "-c", ONE_RANK_ENGINES, *settings], timeout=300, cwd=REPO_ROOT, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("RESULT ")[1])


def test_engines_of_zero_stages_load_no_compiler_back_end(one_rank):
    """DeepSpeed's ZeRO optimizers import its Muon optimizer, whose torch.compile decorators
    would load torch's inductor back end (~1.2 s of CPU at every rank's start): it is imported
    with its functions uncompiled, and nothing else loads the back end."""
    assert one_rank["compiler_loaded"] is False


def test_one_fp32_zero0_rank_steps_as_plain_torch_and_calls_no_collective(one_rank):
    """Where DeepSpeed steps our optimizer itself, its clipping is ours (torch's, foreach) and
    one rank reduces nothing: three steps with clipping active equal plain torch's."""
    result = one_rank["fp32"]
    assert min(result["norms"]) > 0.25, result  # every step was clipped
    assert result["diff"] < 1e-6, result
    assert result["collectives"] == [], result


def test_one_rank_runs_zero2_as_zero1_with_the_same_updates_and_no_device_synchronization(
    one_rank,
):
    """A ZeRO-2 config with DeepSpeed's gradient buckets (as wt103_base) and the same config as
    one rank runs it (ZeRO-1 without buckets): three updates of two micro batches give the same
    losses and weights in bf16 and fp32; DeepSpeed's steps never synchronize the device."""
    results = one_rank["stages"]
    assert list(results) == ["bf16", "fp32"]
    for result in results.values():
        assert result["stages"] == [2, 1] and result["optimizer"] == "DeepSpeedZeroOptimizer"
        assert result["same_losses"] and result["max_weight_difference"] == 0.0, result
        assert result["device_synchronizations"] == 0, result
