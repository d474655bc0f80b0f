"""The names of a run's checkpoints on disk, which the engine writes and reads and the model
reads to tell a training directory from an export (the model imports nothing of the engine)."""

CHECKPOINT_DIR = "checkpoints"  # inside train.out_dir
LATEST = "latest"
CLIENT_FILE = "txl.json"
