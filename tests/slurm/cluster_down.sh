#!/bin/bash
# Stops what cluster_up.sh started (by pid file, never by name) and removes the namespaces.
BASE=${BASE:?set BASE to the directory given to up.sh}
for f in "$BASE"/slurmd-n1.pid "$BASE"/slurmd-n2.pid "$BASE"/slurmctld.pid "$BASE"/munged.pid; do
  [ -s "$f" ] || continue; p=$(cat "$f")
  kill "$p" 2>/dev/null && for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
done
ip netns del txl_n1 2>/dev/null; ip netns del txl_n2 2>/dev/null; true
