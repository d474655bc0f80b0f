"""The run config, checked before any process group or model exists.

- sections.py: the typed sections of a run config JSON (model, train, deepspeed, wandb,
  logging) and `RunConfig`, validated once;
- data.py: the `data` section, the prepared dataset or a weighted mix of corpora;
- optim.py: the `optim` section, optimizer and learning-rate schedule;
- loading.py: a run config from its file, `--set` and `TXL_SET` overrides, `n_token: "auto"`;
- spikes.py: the `spikes` section, loss-spike detection and rollback;
- plan.py: `RunConfig.plan(world_size)`: batch layout, evaluation rows and precision per rank.
- stragglers.py: the `stragglers` section (slow ranks named, warn or stop).

The sections are built by txl_dist/schema.py, one floor down, which the model's own config
uses too.
"""
