#!/usr/bin/env bash
# sched/: the ninth independent generator - communication schedules and overlap as real
# frameworks run them (sequence parallel, distributed-optimizer overlap, 16-way gradient
# accumulation, interleaved pipeline + context-parallel rings, CUDA graphs, uneven call counts),
# collective-order deadlocks, transient and ramping slowdowns, rare comms, agent cadences and a
# degraded NVLink lane. Usage: [SEED=N] bash tests/independent/sched/run_all.sh [PREFIX ...]
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
