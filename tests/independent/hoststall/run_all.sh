#!/usr/bin/env bash
# hoststall/: an independent generator - what the host does between collectives, and training-loop control
# flow (PyTorch / Megatron / DeepSpeed loops): per rank a host timeline (data loader, Python, kernel launches,
# host-only phases, syncs) and a device stream. Controls (no culprit): every rank's loader stalling 6-12 s at
# each epoch start, torch.compile recompiling 14-18 s on every rank at a shape change, ZeRO-Offload CPU Adam
# each step, a 20 s shared-filesystem stall freezing every rank once, evaluation every 20 steps on every rank
# then a barrier, rank 0 evaluating alone 6-9 s every 25 steps while the others wait in a barrier, GC pauses
# hidden behind a 2-iteration launch queue (host-enqueue), gloo DDP with epoch stalls and evaluation. Faults:
# a rank's data-loader worker dying (GPU-timed; at an epoch start, host-enqueue, 128 ranks), a rank blocked
# 40 s in a host lock then recovering (gloo; host-enqueue: one incident, resolved), rank 0 hanging in its
# third rank-0-only evaluation, a ZeRO-Offload CPU Adam deadlock, a recompilation that never finishes on one
# rank, a recompilation storm on one rank (3-6 s stalls, then eager 1.3x), a 1.6x CPU-offloaded optimizer
# (NUMA; GPU-timed, host-enqueue 128 ranks), two ranks of one node launch-bound under CPU contention (both
# named, not their TP/DP peers). 19 job rows of 16-128 ranks, 90-120 simulated s; GPU-timed, host-enqueue
# and gloo probes; agents batching every 100-200 ms, heartbeats every 1 s, steps where a hook would send them.
# Written from the spec, DOMAIN.md, the READMEs and docs, run_scored.sh and islands/ only. Generate, replay,
# score strictly (score.py).
#   [SEED=N] bash tests/independent/hoststall/run_all.sh [SCENARIO-PREFIX ...]   (base seed 1)
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
