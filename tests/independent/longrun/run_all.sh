#!/usr/bin/env bash
# longrun/: the twelfth independent generator - the long horizon (20-60 simulated minutes per job), where
# false alarms accumulate and baselines drift: rank 0 checkpointing alone while the others wait in a
# barrier (repeatedly), distributed checkpoints, periodic evaluation on a new comm, a 1.0 -> 1.7x
# curriculum (gloo DDP), a rank 1.4x slower late in the run, a GPU creeping 1.0 -> 1.5x over 16 min,
# a hang after and inside a checkpoint (host-enqueue plugin and GPU-timed hook), an hour of GC /
# data-loader / NIC / NTP noise, thermal throttling every 8 min, a preemption and restart under the same
# job id followed by a hang. Written from the spec, DOMAIN.md and the READMEs only; gen.py validates its
# captures against the spec. Generate, replay through commwatch, score strictly (score.py).
#   [SEED=N] bash tests/independent/longrun/run_all.sh [SCENARIO-PREFIX ...]   (base seed 1)
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
