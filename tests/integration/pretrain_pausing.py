"""launch/pretrain.py whose checkpoint save of one step never ends: every rank stops in it once
all ranks have written their files, before anything is recorded or published, so a test can
kill the ranks inside the save (or watch the watchdog end it).

Same arguments; TXL_TEST_PAUSE_IN_SAVE=STEP names the save. The pause is the Checkpointer's
after_phase hook, injected here: production code holds no test pause.
"""

from __future__ import annotations

import os
import time

from txl_dist.cli import pretrain
from txl_dist.engine import train

PAUSE_IN_SAVE_ENV = "TXL_TEST_PAUSE_IN_SAVE"


def pause_after_writing(step: int):
    """An after_phase hook that stops this rank after the write phase of step `step`'s save."""

    def after_phase(phase: str, saving: int) -> None:
        if phase == "write" and saving == step:
            while True:  # until the test kills this rank
                time.sleep(60)

    return after_phase


def run_pausing(trainer: train.Trainer, run=train.Trainer.run):
    trainer.checkpoints.after_phase = pause_after_writing(int(os.environ[PAUSE_IN_SAVE_ENV]))
    return run(trainer)


if __name__ == "__main__":
    train.Trainer.run = run_pausing
    pretrain.main()
