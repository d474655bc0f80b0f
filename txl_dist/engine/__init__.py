"""The DeepSpeed training engine: streams -> slots with memories -> checkpoints, metrics.

- start.py: a run's start before any process group (config, run directory, resume point);
- assemble.py: what a run is made of, assembled (process group, engine, data, resume);
- build.py: the model as a run builds it (recomputed, compiled or graphed);
- deepspeed_setup.py: DeepSpeed's config, optimizer, engine and our patches to it;
- data.py: the run's training and evaluation streams, and its data's tokenizer;
- train.py: the loop; memory.py: per-slot memories; graphs.py: train.cuda_graphs;
- overflow.py: bf16 updates with non-finite gradients; schedule.py: learning-rate multipliers;
- metrics.py: the console line, metrics.jsonl, wandb; throughput.py: tokens/s, MFU, peaks;
- summary.py: a run's closing lines; profiling.py: profiler traces of chosen steps;
- init_from.py: train.init_from, a run's first weights from an export or a checkpoint;
- run_dir.py: one run per train.out_dir; checkpoint/: what a checkpoint holds, saved and loaded;
- health/: faults that leave every process alive (loss spikes rolled back, slow ranks named).
"""
