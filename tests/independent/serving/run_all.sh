#!/usr/bin/env bash
# serving/: the sixteenth independent generator - LLM inference serving (vLLM / SGLang / TensorRT-LLM style engines):
# TP 4-8 engines inside a node (small all-reduces every 15-60 ms forward while decoding, prefill forwards
# 5-20x longer), request bursts separated by 10-90 s of idle engines issuing no collective at all while the
# agents heartbeat, data-parallel replicas behind a skewed load balancer, PP 2 serving across two nodes
# (send/recv per micro-batch), disaggregated prefill/decode (KV caches over NCCL send/recv on 2-rank comms),
# GPU-timed plugin records with CUDA-graph decode (GRAPH_CAPTURED) and host-enqueue hooks running ahead, an
# engine scaled up (profiling and graph warm-up forwards) and one scaled down cleanly (COMM_DESTROY, exited).
# Faults: a TP rank hanging mid-decode (GPU-timed and host-enqueue), a prefill rank's KV sender never
# posting, a decode rank hanging with prefill ranks waiting in their sends, hangs at the first all-reduce
# after a 60 s idle gap (GPU-timed and host-enqueue), a 1.5x decode GPU among skewed replicas, a 1.5x
# prefill GPU (disaggregated), a 1.4x stage-1 rank in PP serving. 16 job rows, ~1.5 min. Written from the
# spec, DOMAIN.md, the READMEs and docs only. Generate, replay through commwatch, score strictly (score.py).
#   [SEED=N] bash tests/independent/serving/run_all.sh [SCENARIO-PREFIX ...]   (base seed 1)
exec bash "$(dirname "$0")/../run_scored.sh" "$(dirname "$0")" 1 "$@"
