#!/usr/bin/env bash
# frontier/: the tenth independent generator - schedules and parallelisms of current frameworks
# (zero-bubble and DualPipe pipelines, FSDP2/HSDP prefetch, MoE expert + data parallel, async
# TP chunks, variable-length sequences, 4096 ranks) and the telemetry path as deployed (a
# backlogged agent, jittered flushes, bursts, a NIC flap, an agent dying with its hung rank).
# Generate, replay through commwatch, score strictly (../run_scored.sh; check.py runs in gen.py).
#   [SEED=N] bash tests/independent/frontier/run_all.sh [SCENARIO-PREFIX ...]   (base seed 1)
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
