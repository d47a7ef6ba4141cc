#!/usr/bin/env bash
# runtime/: an independent generator - behaviours of the NCCL / PyTorch distributed runtime itself:
# coalesced collectives (torch _coalescing_manager / ncclGroupStart..End: several all-reduces as one kernel,
# GPU-timed records sharing device start/end) in DDP (64-256 ranks) and Megatron TP x PP x DP jobs, object
# collectives (all_gather_object, broadcast_object_list: size collective, host sync, payload collective), a comm
# split mid-run (ncclCommSplit, new comm ids, COMM_INIT mid-run), lazy connection setup (a comm's first
# collective takes seconds on every rank), GPU-timed and host-enqueue probes in one job, rank 0's checkpoint
# metadata before a side-comm barrier every 50 steps, an IB link flapping with NCCL retries, NCCL's proxy thread
# starved on one node; faults: 1.3x / 1.5x / 1.6x GPUs, collective desync (`if rank == 0: dist.barrier()`,
# GPU-timed and host-enqueue), a rank never launching a coalesced group, hangs between the size and payload
# collectives of all_gather_object and broadcast_object_list, a hang on a host-enqueue node of a mixed-probe job.
# 18 job rows of 16-256 ranks, 70-120 simulated s. Written from the spec, DOMAIN.md, the READMEs and docs,
# run_scored.sh and islands/ only. Generate, replay, score strictly (score.py).
#   [SEED=N] bash tests/independent/runtime/run_all.sh [SCENARIO-PREFIX ...]   (base seed 1)
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
