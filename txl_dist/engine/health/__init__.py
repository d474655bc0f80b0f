"""Training health: faults that leave every process alive (loss spikes, slow ranks, silent corruption).

- monitor.py: the trainer's one handle on all of them, called at fixed points of each step;
- nonfinite.py: non-finite losses counted and bounded (train.max_nonfinite_steps);
- stragglers.py: slow ranks named (section timers, exchange, scores);
- slow_injection.py: TXL_INJECT_SLOW, a slowed rank through the real command;
- spikes.py: the spike detector, a median and MAD over a window of good steps;
- guard.py: the trainer's handle on spikes: checks, no save while spiky, rollbacks and their limit;
- rollback.py: the newest intact checkpoint before a spike restored, the data after it skipped;
- rerun.py: a step whose update was skipped (or a rank's gradient an outlier) trained again, a
  transient fault's rank named;
- record.py: what a checkpoint keeps of it (data position, the statistic, the rollbacks);
- inject.py: faults injected through the real command by environment variables.
"""
