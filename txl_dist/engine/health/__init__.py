"""Training health: faults that leave every process alive (loss spikes, slow ranks, silent corruption).

- stragglers.py: slow ranks named (section timers, exchange, scores);
- slow_injection.py: TXL_INJECT_SLOW, a slowed rank through the real command.
"""
