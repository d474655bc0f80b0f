"""Training health: faults that leave every process alive (loss spikes, slow ranks, silent corruption)."""
