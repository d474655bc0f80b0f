"""Pretrain Transformer-XL: a thin entry point, the command is txl_dist.cli.pretrain.

deepspeed --num_gpus 2 launch/pretrain.py --config configs/tiny.json
torchrun --nproc_per_node 2 launch/pretrain.py --config configs/tiny.json
python launch/pretrain.py --config configs/tiny.json --set train.max_steps=10
"""

from txl_dist.engine.signals import catch_stop_signals
from txl_dist.logs import configure_logging

configure_logging()  # rank from the launcher's RANK: its start-up messages come before the group
catch_stop_signals()  # before the engine's imports take seconds: a preemption warning may come

from txl_dist.cli.pretrain import main  # noqa: E402

if __name__ == "__main__":
    main()
