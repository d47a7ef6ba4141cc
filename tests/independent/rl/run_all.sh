#!/usr/bin/env bash
# rl/: the thirteenth independent generator - RL post-training (RLHF / GRPO as run by veRL, OpenRLHF and
# NeMo-Aligner): rollout engines (vLLM TP 2-4, tiny all-reduces every token step, long-tail generation
# lengths by design), a weight sync from the trainer to the engines every round (NCCL or gloo broadcast,
# or re-shard all-gathers when colocated), FSDP training, and communicators idle for tens of seconds to
# minutes between phases while the processes live and heartbeat. Faults: a 1.5x rollout GPU (colocated and
# split), a 1.3x trainer GPU, a hang inside the weight sync, hangs mid-generation (GPU-timed, and
# host-enqueue behind a gloo metadata broadcast), a trainer process exiting, hangs at the first all-reduce
# after a 60 s idle trainer comm. Written from the spec, DOMAIN.md and the READMEs only. Generate, replay
# through commwatch, score strictly (score.py).
#   [SEED=N] bash tests/independent/rl/run_all.sh [SCENARIO-PREFIX ...]   (base seed 1)
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
