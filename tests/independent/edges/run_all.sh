#!/usr/bin/env bash
# edges/: edge cases the other generators leave out (P2P deadlock, teardown hang, degraded NVLink,
# comm-kernel slowness, single-node TP 8, 2048 ranks, probe restart, MoE all-to-all, ncclCommSplit,
# unbalanced stages, clock drop, GC pauses under a host-enqueue probe, two jobs on the same nodes,
# long steps). Generate, replay through commwatch, score strictly.
#   bash tests/independent/edges/run_all.sh [SCENARIO-PREFIX ...]     (SEED=N overrides the seed, default 1)
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
