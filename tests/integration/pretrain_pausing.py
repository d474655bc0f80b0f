"""launch/pretrain.py whose checkpoint save of one step stops (for good, or until a file exists):
all ranks have written their files, before anything is recorded or published, so a test can
kill the ranks inside the save (or watch the watchdog end it).

Same arguments; TXL_TEST_PAUSE_IN_SAVE=STEP names the save; with TXL_TEST_RELEASE_FILE=PATH
the save goes on once PATH exists (a test stops the run while the save waits). The pause is
the Checkpointer's after_phase hook, injected here: production code holds no test pause.
"""

from __future__ import annotations

import os
import time

from txl_dist.cli import pretrain
from txl_dist.engine import train

PAUSE_IN_SAVE_ENV = "TXL_TEST_PAUSE_IN_SAVE"
RELEASE_FILE_ENV = "TXL_TEST_RELEASE_FILE"


def pause_after_writing(step: int):
    """An after_phase hook that stops this rank after the write phase of step `step`'s save."""

    def after_phase(phase: str, saving: int) -> None:
        release = os.environ.get(RELEASE_FILE_ENV)
        if phase == "write" and saving == step:
            while not (release and os.path.exists(release)):  # or until the test kills this rank
                time.sleep(0.1)

    return after_phase


def run_pausing(trainer: train.Trainer, run=train.Trainer.run):
    trainer.checkpoints.after_phase = pause_after_writing(int(os.environ[PAUSE_IN_SAVE_ENV]))
    return run(trainer)


if __name__ == "__main__":
    train.Trainer.run = run_pausing
    pretrain.main()
