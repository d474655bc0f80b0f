"""launch/pretrain.py whose checkpoint save of one step stops (for good, or until a file exists):
by default all ranks have written their files, before anything is recorded or published, so a
test can kill the ranks inside the save (or watch the watchdog end it).

Same arguments; TXL_TEST_PAUSE_IN_SAVE=STEP names the save; with TXL_TEST_RELEASE_FILE=PATH
the save goes on once PATH exists (a test stops the run while the save waits);
TXL_TEST_PAUSE_PHASE names the phase it stops after (`write` unless set; `publish`: once the
checkpoint is `latest`), TXL_TEST_PAUSE_RANK the one rank that stops (every rank unless set).
A rank restarted by its launcher does not stop. The pause is the Checkpointer's after_phase
hook, injected here: production code holds no test pause.
"""

from __future__ import annotations

import os
import time

from txl_dist.process.restarts import guard_if_restarting, restart_count

PAUSE_IN_SAVE_ENV = "TXL_TEST_PAUSE_IN_SAVE"
RELEASE_FILE_ENV = "TXL_TEST_RELEASE_FILE"
PAUSE_PHASE_ENV = "TXL_TEST_PAUSE_PHASE"
PAUSE_RANK_ENV = "TXL_TEST_PAUSE_RANK"


def pause_after(step: int, phase: str):
    """An after_phase hook that stops this rank after phase `phase` of step `step`'s save."""

    def after_phase(passed: str, saving: int) -> None:
        release = os.environ.get(RELEASE_FILE_ENV)
        if passed == phase and saving == step:
            while not (release and os.path.exists(release)):  # or until the test kills this rank
                time.sleep(0.1)

    return after_phase


def pausing(run):
    """Trainer.run, with the pause the environment names where it applies to this rank."""

    def run_pausing(trainer):
        rank = os.environ.get(PAUSE_RANK_ENV)
        if restart_count() == 0 and rank in (None, os.environ.get("RANK", "0")):
            step, phase = int(os.environ[PAUSE_IN_SAVE_ENV]), os.environ.get(PAUSE_PHASE_ENV)
            trainer.checkpoints.after_phase = pause_after(step, phase or "write")
        return run(trainer)

    return run_pausing


if __name__ == "__main__":
    guard_if_restarting()  # as launch/pretrain.py: under torchrun --max-restarts, a guarded child

    from txl_dist.cli import pretrain
    from txl_dist.engine import train

    train.Trainer.run = pausing(train.Trainer.run)
    pretrain.main()
