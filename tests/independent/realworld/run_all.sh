#!/usr/bin/env bash
# Generate every "realworld" scenario, replay it through commwatch, score strictly (../run_scored.sh).
#   [SEED=N] bash tests/independent/realworld/run_all.sh [SCENARIO-PREFIX ...]   (base seed 1000 by default)
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1000 "$@"
