#!/usr/bin/env bash
# How often perfsuite names the right node, and how often a clean world names nobody, on emulated
# nodes of this machine (root: network namespaces, tc, cgroup v1 cpu). Each run is one world;
# every results file is kept in OUT, and the counts are printed at the end (and can be printed
# again from the files: python -m perfsuite.experiments.straggler_rates OUT).
#
#   bash scripts/straggler-rates.sh OUT [RUNS]      (RUNS per kind, default 20)
#
# Kinds (4 emulated nodes; RUNS worlds each):
#   link-allreduce   allreduce at 1 MiB, node2's link at 100mbit, the rest at 1gbit
#   link-nodes       perfsuite nodes, the same network
#   cpu-training     torch-epoch small-cnn on torch-gloo, 40 steps, node3's CPU throttled
#   clean-allreduce  allreduce at 4 B, 64 KiB and 1 MiB, every link at 1gbit
#   clean-nodes      perfsuite nodes, every link at 1gbit
#   clean-training   torch-epoch as above, no node throttled
#   clean-plain      the default allreduce sweep on 2 ranks, no emulation (13 sizes)
set -euo pipefail
out=${1:?usage: straggler-rates.sh OUT [RUNS]}
runs=${2:-20}
py=${PYTHON:-python}
mkdir -p "$out"
ps() { "$py" -m perfsuite.faces.cli "$@" > /dev/null 2>&1 || true; }  # exit 1 names a node: not an error here
# On 2 cores, 4 emulated nodes share the machine: each node's fair share is half a core, so the
# throttled node gets half of that (CPU_QUOTA overrides).
cpu=${CPU_QUOTA:-0.25}
world=(--transports mpi --world-sizes 4 --max-contention off --rounds 1)
# 40 steps: a step's compute is noisy with 4 ranks on 2 cores, and 16 blocks of 1-2 steps (the
# default 20) bound a rank's ratio too loosely to name x1.8 every time.
train=(--benchmarks torch-epoch --transports torch-gloo --world-sizes 4 --models small-cnn --iters 40
       --max-contention off --rounds 1)
for i in $(seq -w 1 "$runs"); do
  ps run "${world[@]}" --sizes 1MiB --iters 64 --emulated-network 1gbit,node2=100mbit --json "$out/link-allreduce-$i.json"
  ps run "${world[@]}" --sizes 4,64KiB,1MiB --iters 64 --emulated-network 1gbit --json "$out/clean-allreduce-$i.json"
  ps nodes --nodes 4 --emulated-network 1gbit,node2=100mbit --json "$out/link-nodes-$i.json"
  ps nodes --nodes 4 --emulated-network 1gbit --json "$out/clean-nodes-$i.json"
  ps run "${train[@]}" --emulated-network "1gbit,node3=cpu:$cpu" --json "$out/cpu-training-$i.json"
  ps run "${train[@]}" --emulated-network 1gbit --json "$out/clean-training-$i.json"
  ps run --transports mpi --world-sizes 2 --rounds 1 --json "$out/clean-plain-$i.json"
  echo "# round $i of $runs done"
done
"$py" -m perfsuite.experiments.straggler_rates "$out"
