"""The spike record in txl.json: a resume continues its position, statistic and rollbacks."""

import json

from txl_dist.config.spikes import SpikesConfig
from txl_dist.engine.checkpoint.parts import RunState
from txl_dist.engine.health.record import Rollback, SpikeRecord, SpikesPart
from txl_dist.engine.health.spikes import Observation, SpikeDetector


def part(step: int = 0) -> SpikesPart:
    return SpikesPart(SpikeRecord(SpikeDetector(SpikesConfig(window=3))), RunState("r", step))


def test_position_statistic_and_rollbacks_round_trip_through_json():
    saved = part()
    for step in range(1, 5):
        saved.record.detector.observe(Observation(step, step, 5.0 + step, None))
    saved.record.position = 17
    saved.record.rollbacks.append(Rollback(12, 10, 9.5, 5.0, 0.1, 5, [6, 17]))
    loaded = part()
    loaded.load_state_dict(json.loads(json.dumps(saved.state_dict())))
    assert loaded.state_dict() == saved.state_dict()
    assert loaded.record.rollbacks[0].skipped == [6, 17]
    assert list(loaded.record.detector.losses) == [7.0, 8.0, 9.0]


def test_a_checkpoint_from_before_the_record_resumes_at_its_step():
    loaded = part(step=40)
    loaded.load_state_dict(None)
    assert loaded.record.position == 40 and loaded.record.rollbacks == []
