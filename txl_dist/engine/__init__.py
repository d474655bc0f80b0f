"""The DeepSpeed training engine: streams -> slots with memories -> checkpoints, metrics."""
