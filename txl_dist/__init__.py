"""txl-dist: distributed pretraining of Transformer-XL.

- model/: Transformer-XL in plain PyTorch (torch only);
- config/ and schema.py: the run config, checked before anything starts, and dataclasses from
  JSON;
- engine/: the DeepSpeed training engine and its checkpoints;
- evaluation/: a model scored on a split or a text, sweeps, what a loss reads as;
- process/: a training process's place in the job, stops, hangs and restarts;
- exports/: what the commands do with an exported model: load, text, generation;
- hf/: the Hugging Face export; harness/: lm-evaluation-harness models;
- cli/: the commands;
- logs.py, files.py, stop_note.py: the log path, files written into runs, the note an early
  stop leaves for the batch script;
- checkpoint_names.py: a checkpoint's directory and file names, for the engine and the model.
"""
