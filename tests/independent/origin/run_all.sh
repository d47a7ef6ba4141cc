#!/usr/bin/env bash
# origin/: the eleventh independent generator - faults present FROM THE FIRST ITERATION, before any
# baseline can be learnt (slow ranks 1.3x / 1.6x in Megatron 3D, gloo DDP, a plugin-only TP 1
# pipeline and FSDP; a slow node; early thermal throttling; hangs in the job's first collective and
# first pipeline send; a slow rank plus a later hang; unbalanced stages) beside healthy warm-ups.
# Generate (gen.py validates its captures against the spec), replay through commwatch, score strictly.
#   [SEED=N] bash tests/independent/origin/run_all.sh [SCENARIO-PREFIX ...]   (base seed 1)
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
