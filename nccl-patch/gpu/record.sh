#!/bin/bash
# Records what the probes see under a real NCCL on one GPU, and the overhead table.
# usage: nccl-patch/gpu/record.sh OUTDIR [record|overhead|all]
#   (on a machine with a GPU, PyTorch and NCCL; default all)
# Writes OUTDIR/record.tgz (traces, ring contents, logs) and prints a summary.
# ONLY=REGEX runs only the runs whose name matches.
set -u
OUT=${1:?usage: record.sh OUTDIR [record|overhead|all]}
WHAT=${2:-all}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=/tmp/cw-record
rm -rf "$W" /dev/shm/cw-record && mkdir -p "$W" "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$W/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())" | tee -a "$W/gpu.txt"
nproc | tee -a "$W/gpu.txt"
make -s -C "$ROOT/nccl-patch" all recorder || exit 1
# commwatch without installing it: the package layout of setup.py, by links.
P=/tmp/cw-pkg; rm -rf $P; mkdir -p $P/commwatch
for f in "$ROOT"/commwatch/*; do ln -s "$f" $P/commwatch/; done
for d in producers streams sinks; do ln -s "$ROOT/$d" $P/commwatch/$d; done
export PYTHONPATH=$P
LIB=$ROOT/nccl-patch/build/libnccl-profiler-commwatch.so
REC=$ROOT/nccl-patch/build/libnccl-profiler-commwatch-recorder.so
PORT=29600

# run NAME WORLD PROBE SCENARIO [workload args...]; PROBE: none | plugin | recorder | hook
run() {
  local name=$1 world=$2 probe=$3 scenario=$4; shift 4
  [[ -n ${ONLY:-} && ! $name =~ $ONLY ]] && return
  PORT=$((PORT + 1))
  local pids=()
  for ((r = 0; r < world; r++)); do
    (
      export RANK=$r COMMWATCH_JOB_ID=$name COMMWATCH_RING_DIR=/dev/shm/cw-record NCCL_DEBUG=${NCCL_DEBUG:-WARN}
      if ((world > 1)); then export NCCL_HOSTID=cw-host-$r NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1; fi
      args=(--probe nccl)
      case $probe in
        plugin) export NCCL_PROFILER_PLUGIN=$LIB ;;
        recorder) export NCCL_PROFILER_PLUGIN=$REC COMMWATCH_RECORD_PLUGIN=$LIB COMMWATCH_RECORD_FILE=$W/$name.$r.trace ;;
        hook) args=(--probe hook) ;;
      esac
      exec timeout 90 python3 "$ROOT/nccl-patch/gpu/workload.py" "$scenario" --rank $r --world "$world" \
        --port $PORT --out "$W" "${args[@]}" "$@" >"$W/$name.$r.out" 2>&1
    ) &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  echo "$(date +%T) $name world=$world probe=$probe $scenario rc=$rc: $(tail -c 300 "$W/$name.0.out" | tail -1 | cut -c1-200)"
}

if [[ $WHAT == record || $WHAT == all ]]; then
NCCL_DEBUG=INFO run sem-ws1 1 recorder semantics
grep -h "PROFILER\|commwatch" "$W/sem-ws1.0.out" | head -5
run sem-ws2 2 recorder semantics
run hang-nccl 2 recorder hang --steps 200 --compute 10 --dim 4096 --fault-at 60 --fault-s 8
run gpuhang-nccl 2 recorder gpuhang --steps 200 --compute 10 --dim 4096 --fault-at 60 --fault-s 8
run slow-nccl 2 recorder slow --steps 250 --compute 10 --dim 4096 --fault-at 60 --slow-s 0.04
run hang-hook 2 hook hang --steps 200 --compute 10 --dim 4096 --fault-at 60 --fault-s 8
run gpuhang-hook 2 hook gpuhang --steps 200 --compute 10 --dim 4096 --fault-at 60 --fault-s 8
run slow-hook 2 hook slow --steps 250 --compute 10 --dim 4096 --fault-at 60 --slow-s 0.04
run sem-hook 2 hook semantics
run ddp-hook 2 hook ddp --steps 30
run ddp-nccl 2 recorder ddp --steps 30
run fsdp-hook 2 hook fsdp --steps 10
run fsdp-nccl 2 recorder fsdp --steps 10
fi
if [[ $WHAT == overhead || $WHAT == all ]]; then
# a step of ~50 ms of matmuls (two ranks share the GPU: ~100 ms) and 16 gradient all_reduce
# of 1 MiB; rounds alternate the probes so that drift of the machine spreads over all three
for round in 1 2 3; do
  for probe in none plugin hook; do
    run train-ws1-$probe-$round 1 $probe train --steps 150 --compute 20 --dim 4096 --buckets 16 --bucket-kib 1024
    run train-ws2-$probe-$round 2 $probe train --steps 100 --compute 20 --dim 4096 --buckets 16 --bucket-kib 1024
  done
done
fi
python3 - "$W" <<'PY'
import json, sys, glob, os
w = sys.argv[1]
print(f"{'run':24} {'step ms':>9} {'p10':>8} {'p90':>8} {'calls/step':>10} {'enqueue us/call':>16}")
for f in sorted(glob.glob(f"{w}/train-*.0.log.json")):
    d = json.load(open(f))
    print(f"{os.path.basename(f)[:-11]:24} {d['step_ms_median']:9.3f} {d['step_ms_p10_p90'][0]:8.3f} {d['step_ms_p10_p90'][1]:8.3f} {d['calls_per_step']:10d} {d.get('enqueue_us_per_call', 0):16.3f}")
PY
ls -la "$W" | head -80
tar czf "$OUT/record.tgz" -C "$W" .
