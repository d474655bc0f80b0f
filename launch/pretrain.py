"""Pretrain Transformer-XL: a thin entry point, the command is txl_dist.cli.pretrain.

deepspeed --num_gpus 2 launch/pretrain.py --config configs/tiny.json
torchrun --nproc_per_node 2 launch/pretrain.py --config configs/tiny.json
torchrun --nproc_per_node 2 --max-restarts 3 launch/pretrain.py --config C --resume auto
python launch/pretrain.py --config configs/tiny.json --set train.max_steps=10
"""

import os

# Before torch loads: its CPU allocator then asks the kernel for 2 MB pages for buffers of 2 MB or
# more (where /sys/kernel/mm/transparent_hugepage/enabled allows them). Each tiny-config step
# frees and re-faults its large buffers; with 4 KB pages that was thousands of page faults a
# step; 2 MB pages cut the faults tenfold and a 1-process step by about 7% on average (README).
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from txl_dist.process.allocator import keep_freed_memory  # noqa: E402

keep_freed_memory()  # the buffers a step frees are kept for the next: about 10% a tiny CPU step

from txl_dist.logs import configure_logging  # noqa: E402
from txl_dist.process.restarts import guard_if_restarting  # noqa: E402
from txl_dist.process.signals import catch_stop_signals  # noqa: E402

configure_logging()  # rank from the launcher's RANK: its start-up messages come before the group
catch_stop_signals()  # before the engine's imports take seconds: a preemption warning may come
guard_if_restarting()  # under a launcher that restarts ranks: the rank becomes our child

from txl_dist.cli.pretrain import main  # noqa: E402

if __name__ == "__main__":
    main()
