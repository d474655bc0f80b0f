"""Run by test_watchdog.py: one rank of a 2-process gloo group, a step (an all-reduce) per phase.

python tests/process/hang_worker.py RANK PORT OUT_DIR HANG_TIMEOUT_S

Rank 0 hosts the store, as under DeepSpeed's launcher (PORT 0: it picks one and prints it);
"running" is printed after a few steps, then it steps until a test stops a rank.
"""

import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from txl_dist.config.sections import TrainConfig
from txl_dist.logs import configure_logging
from txl_dist.process.watchdog import Watchdog

if __name__ == "__main__":
    rank, port, out_dir, hang_timeout_s = sys.argv[1:]
    rank = int(rank)
    store = dist.TCPStore(
        "127.0.0.1",
        int(port),
        2,
        is_master=rank == 0,
        timeout=timedelta(seconds=60),
        wait_for_workers=False,  # rank 1 learns the port from our first line
    )
    print(f"port {store.port}", flush=True)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    configure_logging(rank == 0)
    train = TrainConfig(out_dir, global_rows=2, max_steps=1, hang_timeout_s=float(hang_timeout_s))
    watchdog = Watchdog.for_run(train, rank, world_size=2)
    step = 0
    while True:
        step += 1
        with watchdog.phase("step", step, slow=step == 1):
            dist.all_reduce(torch.ones(1))
            time.sleep(0.05)
        if step == 3:
            print("running", flush=True)
