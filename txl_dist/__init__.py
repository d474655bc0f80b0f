"""txl-dist: distributed pretraining of Transformer-XL.

- model/: Transformer-XL in plain PyTorch (torch only);
- config/ and schema.py: the run config, checked before anything starts, and dataclasses from
  JSON;
- engine/: the DeepSpeed training engine, its checkpoints and evaluation;
- process/: a training process's place in the job, stops, hangs and restarts;
- exports/: what the commands do with an exported model: load, text, generation, sweeps;
- hf/: the Hugging Face export; harness/: lm-evaluation-harness models;
- cli/: the commands;
- logs.py, scores.py, files.py: the log path, what a loss reads as, files written into runs;
- checkpoint_names.py: a checkpoint's directory and file names, for the engine and the model.
"""
