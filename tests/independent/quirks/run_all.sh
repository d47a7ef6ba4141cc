#!/usr/bin/env bash
# Generate every "quirks" scenario, replay it through commwatch, score strictly (../run_scored.sh).
#   [SEED=N] bash tests/independent/quirks/run_all.sh [SCENARIO-PREFIX ...]   (base seed 1 by default)
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
