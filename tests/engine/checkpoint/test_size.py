"""One checkpoint's size estimated from its config, against a real checkpoint's files."""

import json

from tests.conftest import REPO_ROOT
from txl_dist.config.sections import run_config_from_dict
from txl_dist.engine.checkpoint.size import checkpoint_bytes

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "checkpoint_v1" / "global_step4"


def test_the_estimate_covers_a_real_checkpoints_model_states_with_little_to_spare():
    record = json.loads((FIXTURE / "txl.json").read_text())
    estimate = checkpoint_bytes(run_config_from_dict(record["config"]))
    # DeepSpeed's files of a bf16 ZeRO-2 run of 2 ranks: the weights, fp32 master weights and
    # Adam's moments (the memories are rows' activations, not model states).
    states = sum(p.stat().st_size for p in FIXTURE.glob("*.pt") if "memory" not in p.name)
    assert states <= estimate <= 1.25 * states
