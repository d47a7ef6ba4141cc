#!/usr/bin/env bash
# tenants/: the fifteenth independent generator - a shared cluster: many jobs at once in one capture, as one
# commwatch worker sees a multi-tenant fleet. Megatron-like TP/PP/DP jobs, FSDP and gloo DDP of 8-64 ranks,
# 0.3-8 s steps, GPU-timed plugin records, host-enqueue hook records (a blocked rank's step queued behind
# its blocked call) and host-blocking gloo in one capture; agents batching per node and comm every 200 ms,
# heartbeating every 1 s (`exited` for a gone process); every node its own clock (ms apart, jobs up to
# +-90 s off the worker, drifting). Scenarios: 40 concurrent jobs with a hang, a 1.5x GPU, a stuck
# completion path and a job ending mid-capture (a_fleet40); jobs starting and ending throughout, a job id
# reused by a new run, a preemption while a slow-rank incident is open and a new job on the released nodes
# hanging a minute later (b_churn); 12 jobs -90..+90 s off with drift, a hang in the one most ahead and a
# 1.3x rank in the one most behind (c_skew); a_fleet40's faulty jobs alone, compared with the combined
# capture (d_isolation); fabric congestion slowing every multi-node job 10-20 % for 30 s plus a real 1.6x
# GPU (e_noisy_neighbours). Every job scored on its own. Written from the spec, DOMAIN.md, the READMEs
# and docs only. Generate, replay through commwatch, score strictly (score.py).
#   [SEED=N] bash tests/independent/tenants/run_all.sh [SCENARIO-PREFIX ...]   (base seed 1)
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
