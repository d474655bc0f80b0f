#!/usr/bin/env bash
# Multi-node training, one launcher per node: run this once on every node; the launcher starts the
# node's ranks and meets the other nodes at node 0's address. No ssh between nodes.
#
#   TXL_NNODES=2 TXL_NODE_RANK=0 TXL_MASTER_ADDR=10.0.0.1 launch/multinode.sh --config C [--set ...]
#   TXL_NNODES=2 TXL_NODE_RANK=1 TXL_MASTER_ADDR=10.0.0.1 launch/multinode.sh --config C [--set ...]
#
#   TXL_LAUNCHER        torchrun (static rendezvous, default) or deepspeed (--no_ssh --node_rank)
#   TXL_NPROC_PER_NODE  ranks on this node (default: its GPUs, 1 without GPUs)
#   TXL_MASTER_PORT     rendezvous port on node 0 (default 29500)
#   TXL_SOCKET_IFNAME   network interface for gloo/nccl (sets GLOO_/NCCL_SOCKET_IFNAME)
#   TXL_PYTHON          interpreter with txl-dist installed (default: .venv/bin/python, python3)
#   TXL_MAX_RESTARTS    torchrun restarts the node's ranks after a failure up to this often
#                       (default 3; 0: fail at once)
#   TXL_LOCAL_ADDR      this node's address for torchrun's c10d rendezvous (used with
#                       restarts; default: TXL_SOCKET_IFNAME's address, else the hostname's)
# Inside a SLURM job step (launch/slurm/pretrain.sbatch) TXL_NODE_RANK defaults to SLURM_NODEID.
# Every start resumes (--resume auto). If a rank dies, its node's launcher stops the node's other
# ranks at once; the other nodes' ranks fail their next collective. With torchrun every node's
# launcher then starts its ranks again (they meet at node 0 again and resume from the last
# complete checkpoint), until TXL_MAX_RESTARTS is spent; then, and with DeepSpeed's launcher
# (which has no restarts), the launchers exit non-zero. pretrain.sbatch restarts the whole step
# itself: it sets TXL_RESTART, and torchrun then restarts nothing.
set -euo pipefail
# A scheduler's warning signal (USR1) goes to every process of the job: the ranks checkpoint on
# it, the launchers (which would die of it) ignore it. The ranks install their own handler.
trap '' USR1
cd "$(dirname "$0")/.."
nnodes="${TXL_NNODES:?set TXL_NNODES to the number of nodes}"
node_rank="${TXL_NODE_RANK:-${SLURM_NODEID:?set TXL_NODE_RANK to the index of this node (0: the master)}}"
master_addr="${TXL_MASTER_ADDR:?set TXL_MASTER_ADDR to the address of node 0}"
master_port="${TXL_MASTER_PORT:-29500}"
python="${TXL_PYTHON:-.venv/bin/python}"
[ -x "$python" ] || python=python3
gpus="$( (nvidia-smi -L 2>/dev/null || true) | wc -l)"
nproc="${TXL_NPROC_PER_NODE:-$((gpus > 0 ? gpus : 1))}"
if [ -n "${TXL_SOCKET_IFNAME:-}" ]; then
  export GLOO_SOCKET_IFNAME="$TXL_SOCKET_IFNAME" NCCL_SOCKET_IFNAME="$TXL_SOCKET_IFNAME"
fi

case "${TXL_LAUNCHER:-torchrun}" in
  torchrun)
    restarts="${TXL_MAX_RESTARTS:-3}"
    if [ -n "${TXL_RESTART:-}" ] || [ "$restarts" = 0 ]; then
      # No restarts by torchrun: a static rendezvous, node ranks as given.
      rendezvous=(--node_rank "$node_rank" --master_addr "$master_addr"
        --master_port "$master_port" --max-restarts 0)
    else
      # Restarts need torchrun's c10d rendezvous, with a fresh store for the ranks at every
      # start: a store kept across restarts (the static rendezvous's, or c10d's shared one)
      # hands the new ranks their predecessors' gloo addresses and they hang
      # (pytorch/pytorch#135712). c10d numbers the nodes by their addresses; node 0 hosts it.
      export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
      is_host=false
      [ "$node_rank" = 0 ] && is_host=true
      rendezvous=(--rdzv-backend c10d --rdzv-endpoint "$master_addr:$master_port"
        --rdzv-id txl-dist --rdzv-conf "is_host=$is_host" --max-restarts "$restarts")
      # The address other nodes reach this one at (the hostname may resolve to loopback).
      local_addr="${TXL_LOCAL_ADDR:-}"
      if [ -z "$local_addr" ] && [ -n "${TXL_SOCKET_IFNAME:-}" ]; then
        local_addr="$(ip -4 -o addr show dev "$TXL_SOCKET_IFNAME" | awk '{print $4}' |
          cut -d/ -f1 | head -n1)"
      fi
      if [ -n "$local_addr" ]; then rendezvous+=(--local-addr "$local_addr"); fi
    fi
    exec "$python" -m torch.distributed.run --nnodes "$nnodes" --nproc_per_node "$nproc" \
      "${rendezvous[@]}" launch/pretrain.py --resume auto "$@"
    ;;
  deepspeed)
    # --no_ssh still reads the world from a hostfile; only its shape matters (names are
    # unused). It goes in a fresh private directory: a predictable shared path could be planted.
    hostfile="$(mktemp -d "${TMPDIR:-/tmp}/txl-hostfile.XXXXXX")/hostfile"
    for i in $(seq 0 $((nnodes - 1))); do echo "node$i slots=$nproc"; done >"$hostfile"
    exec "$python" -m deepspeed.launcher.runner --hostfile "$hostfile" --no_ssh \
      --node_rank "$node_rank" --master_addr "$master_addr" --master_port "$master_port" \
      launch/pretrain.py --resume auto "$@"
    ;;
  *)
    echo "TXL_LAUNCHER=${TXL_LAUNCHER} is not a launcher: use torchrun or deepspeed" >&2
    exit 2
    ;;
esac
