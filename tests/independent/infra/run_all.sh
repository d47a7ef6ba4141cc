#!/usr/bin/env bash
# infra/: the fourteenth independent generator - correlated infrastructure faults at cluster scale, as
# large-fleet reports describe them (Llama 3's 54-day run: 419 interruptions; top-of-rack switches, power,
# cooling, fabric congestion, host maintenance): faults whose root is a set of machines, or none. Megatron
# jobs of 64-512 ranks (TP 8 in a node, PP 2-4, DP across nodes, 4 nodes a rack), GPU-timed plugin records
# mostly, host-enqueue and one gloo DDP job, agents batching every 140-200 ms and heartbeating every 1 s,
# node clocks ms apart, hardware samples. Faults: fabric-wide congestion (no culprit), a degraded ToR switch
# (a slow link of 4 nodes), a power-capped rack (32 slow GPUs), a rack switch dying (32 ranks and 4 agents
# cut off), a node drained for maintenance with the job torn down, a cooling ramp on one node, two unrelated
# faults in one job, a rack-wide NTP step, a NIC dying inside a data-parallel all-reduce, a straggler inside
# a power-capped rack; host-enqueue and gloo variants. Written from the spec, DOMAIN.md and the READMEs
# only. Generate, replay through commwatch, score strictly (score.py).
#   [SEED=N] bash tests/independent/infra/run_all.sh [SCENARIO-PREFIX ...]   (base seed 1)
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
