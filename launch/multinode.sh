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
# Inside a SLURM job step (launch/slurm/pretrain.sbatch) TXL_NODE_RANK defaults to SLURM_NODEID.
# Every start resumes (--resume auto). If a rank dies, its node's launcher stops the node's other
# ranks at once and exits non-zero; the other nodes fail within train.dist_timeout_s.
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
    exec "$python" -m torch.distributed.run --nnodes "$nnodes" --node_rank "$node_rank" \
      --nproc_per_node "$nproc" --master_addr "$master_addr" --master_port "$master_port" \
      launch/pretrain.py --resume auto "$@"
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
