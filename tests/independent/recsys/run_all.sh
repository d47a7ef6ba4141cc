#!/usr/bin/env bash
# recsys/: an independent generator - recommendation-model training (DLRM / TorchRec style): embedding
# tables sharded model-parallel over all ranks (table-wise, row-wise with reduce-scatter / all-gather, and a
# two-level intra-node then inter-node all-to-all), dense MLPs data-parallel (DDP buckets on a second stream,
# overlapped with backward); per iteration the next batch's KJT input all-to-alls (TrainPipelineSparseDist,
# 1 and 2 batches deep), the pooled-embedding forward all-to-all and the backward all-to-all of embedding
# gradients; 30-85 ms iterations; all-to-all sizes skewed by hot tables (structurally late ranks, not faults);
# bursty host data loading and an input-bound control; GPU-timed plugin records, host-enqueue hook records and
# gloo (blocking); agents batching every 200 ms, heartbeats every 1 s, node clocks +-4 ms; steps from a hook.
# Faults: hangs in the forward all-to-all (GPU-timed, host-enqueue, gloo) and in a DDP bucket (GPU-timed,
# host-enqueue), a rank stopping mid-backward holding the GIL with a 2-deep pipeline, a 1.5x GPU (TW
# GPU-timed, TW host-enqueue, RW), a 2x slower data loader (GPU-timed, gloo), a degraded NIC on one node of
# a two-level job; controls: skew, hot-shard bursts, input-bound, 128 ranks, row-wise, gloo, two-level.
# Written from the spec, DOMAIN.md, the READMEs and docs only. Generate, replay, score strictly (score.py).
#   [SEED=N] bash tests/independent/recsys/run_all.sh [SCENARIO-PREFIX ...]   (base seed 1)
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
