#!/usr/bin/env bash
# noisy/: healthy noise of real jobs and shared infrastructure (packed sequences, MoE routing,
# rank-0 logging and evaluation, DDP uneven inputs with Join, async checkpoints, a shared NIC,
# an 8 % slow rank, allocator retries, a 2048-rank job) and faults hidden in it (slow ranks,
# hangs in an eval loop / a checkpoint / a deep launch queue, a node replaced, a torchft abort).
# Generates into noisy/caps, replays each capture with `commwatch replay --stats`, scores
# strictly with score.py (which refuses captures check.py rejects). See gen.py's docstring.
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
