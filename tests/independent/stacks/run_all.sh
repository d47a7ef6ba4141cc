#!/usr/bin/env bash
# stacks/: an independent generator - training stacks the other generators do not cover, modelled from how
# they issue NCCL calls: DeepSpeed ZeRO-3 (prefetched parameter all-gathers, gradient reduce-scatter buckets
# overlapping backward, a tiny overflow all-reduce every step, all on the data-parallel comm's NCCL stream in
# issue order), the DeepSpeed pipeline engine (its TrainSchedule, blocking-order send/recv on per-pair 2-rank
# comms, tied-embedding all-reduce, per-stage gradient all-reduce, loss broadcast), DeepSpeed-Ulysses (two
# all-to-alls per attention layer forward and backward in a sequence-parallel group inside a ZeRO-2 job),
# JAX/XLA on GPU (no step records: async all-gather / reduce-scatter start/done two layers ahead, ring
# collective-permutes on all ranks at once, same-size all-gathers per scan iteration, CUDA-graph replays
# flagged GRAPH_CAPTURED) and a small gloo DDP job (host-blocking, 50-100 ms steps). GPU-timed plugin,
# host-enqueue hook and host-blocking probes; agents batching every 200 ms, heartbeats every 1 s (with p2p
# counters), node clocks +-4 ms. Faults: 1.5x/1.3x/1.4x/2x slow ranks, host hangs at a prefetch all-gather, an
# all-to-all, an unposted pipeline send, a graph launch and a gloo broadcast, a GPU stopping inside a permute
# ring, a rank whose completions stop being reported (COMPLETION_LOST); a last stage heavier by design.
# Written from the spec, DOMAIN.md, the READMEs and islands/ only. Generate, replay, score strictly.
#   [SEED=N] bash tests/independent/stacks/run_all.sh [SCENARIO-PREFIX ...]   (base seed 1)
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
