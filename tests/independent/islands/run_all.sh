#!/usr/bin/env bash
# islands/: an independent generator - multi-island / cross-datacenter training (DiLoCo, OpenDiLoCo,
# Streaming DiLoCo, INTELLECT-1 style; HSDP inside each island): 2-4 sites of 2-8 nodes (8 GPUs a node),
# FSDP-style all-gathers / reduce-scatters on a per-node shard comm and an HSDP replicate all-reduce across
# the island's nodes every 0.4-1.6 s iteration; an outer sync of pseudo-gradients every H = 25-100 steps over
# a WAN taking 5-40 s (one outer comm per shard over every node, or over one leader per island followed by
# an island broadcast), blocking or streaming (3-4 fragments staggered, on a side stream, merged 4-5 steps
# later); one site's GPUs 1.2x slower by design (the others wait in every outer sync: structural); GPU-timed
# plugin and host-enqueue hook records, agents batching every 200 ms, heartbeats every 1 s, sites' clocks
# +-35 ms apart with drift and NTP steps. Faults: a rank hanging in inner training (GPU-timed, host-enqueue,
# streaming), a rank never entering the outer sync (all-node and leader outer comms), a host-enqueue rank
# stalling 70 s in a streaming outer step, a 1.5x GPU (fast site, slow site, host-enqueue, 256 ranks), a
# degraded WAN (2-3x outer syncs: no rank at fault). 18 job rows of 64-256 ranks, 180-260 simulated s.
# Written from the spec, DOMAIN.md, the READMEs and docs only. Generate, replay, score strictly (score.py).
#   [SEED=N] bash tests/independent/islands/run_all.sh [SCENARIO-PREFIX ...]   (base seed 1)
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
