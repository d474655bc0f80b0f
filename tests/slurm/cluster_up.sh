#!/bin/bash
# A real 2-node SLURM cluster on one Debian 12 machine, for tests (needs root).
# Nodes n1 (10.200.0.1) and n2 (10.200.0.2) are network namespaces joined by a veth pair whose
# interface is named the same in both ("txlv0"), so one GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME fits both.
# Usage: BASE=/some/dir cluster_up.sh   -> prints "cluster up"; clients need
#        SLURM_CONF=$BASE/etc/slurm.conf and must run inside node n1's namespace:
#        nsenter --net=/run/netns/txl_n1 sbatch job.sbatch
# Adapted from the team's slurm-testbed; cluster_down.sh with the same BASE undoes everything.
set -euo pipefail
BASE=${BASE:?set BASE to a scratch directory}
mkdir -p "$BASE"/{etc,state,spool,log}
# Installing is the caller's choice (tests/slurm/conftest.py's system_packages).
command -v slurmctld >/dev/null || { echo "slurm-wlm is not installed: apt-get install slurm-wlm munge"; exit 1; }
# No init system starts daemons here: start munge by hand (the package already made its key).
mkdir -p /run/munge && chown munge:munge /run/munge
# Remember whether we started it, so that cluster_down.sh stops only our own munged.
if ! { [ -s /run/munge/munged.pid ] && kill -0 "$(cat /run/munge/munged.pid)" 2>/dev/null; }; then
  runuser -u munge -- /usr/sbin/munged
  cp /run/munge/munged.pid "$BASE/munged.pid"
fi
for i in 1 2; do ip netns add txl_n$i; done
ip link add txl-v1 type veth peer name txl-v2
for i in 1 2; do
  ip link set txl-v$i netns txl_n$i
  ip -n txl_n$i link set txl-v$i name txlv0
  ip -n txl_n$i addr add 10.200.0.$i/24 dev txlv0
  ip -n txl_n$i link set lo up
  ip -n txl_n$i link set txlv0 up
done
cat > "$BASE/etc/slurm.conf" <<EOC
ClusterName=txltest
SlurmctldHost=$(hostname -s)(10.200.0.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool/slurmd-%n
SlurmctldPidFile=$BASE/slurmctld.pid
SlurmdPidFile=$BASE/slurmd-%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
NodeName=n1 NodeAddr=10.200.0.1 CPUs=$(nproc) RealMemory=8000 State=UNKNOWN
NodeName=n2 NodeAddr=10.200.0.2 CPUs=$(nproc) RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
EOC
export SLURM_CONF=$BASE/etc/slurm.conf
# nsenter --net, not `ip netns exec`: the latter remounts /sys and slurmd then exits (no cgroup fs).
nsenter --net=/run/netns/txl_n1 slurmctld -f "$SLURM_CONF"
nsenter --net=/run/netns/txl_n1 slurmd -f "$SLURM_CONF" -N n1
nsenter --net=/run/netns/txl_n2 slurmd -f "$SLURM_CONF" -N n2
for _ in $(seq 1 60); do
  [ "$(nsenter --net=/run/netns/txl_n1 sinfo -h -o '%D %T' 2>/dev/null)" = "2 idle" ] && { echo "cluster up"; exit 0; }
  sleep 0.5
done
echo "cluster did not come up"; tail -n 20 "$BASE"/log/*.log; exit 1
