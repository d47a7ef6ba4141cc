#!/bin/bash
# Isolation check: split a multi-job capture into one capture per job (same messages, same ts_ns),
# replay each alone, and compare with the job's incidents in the combined replay.
cd "$(dirname "$0")"
ROOT=$(cd ../../.. && pwd)
PY=${PY:-$ROOT/.venv/bin/python}; CW=${CW:-$ROOT/.venv/bin/commwatch}
for s in "$@"; do
  for job in $($PY -c "import json;print(' '.join(j['job'] for j in json.load(open('caps/$s.truth.json'))['jobs']))"); do
    $PY -c "
import json,sys
with open('caps/${s}__$job.cwcap','w') as f:
    for l in open('caps/$s.cwcap'):
        m=json.loads(l)
        if m['key'].split('/')[0]=='$job': f.write(l)"
    $CW replay caps/${s}__$job.cwcap > caps/${s}__$job.alone.jsonl 2>/dev/null
    grep "\"job\":\"$job\"" caps/$s.alerts.jsonl > caps/${s}__$job.combined.jsonl
    if cmp -s caps/${s}__$job.alone.jsonl caps/${s}__$job.combined.jsonl; then
      echo "$s $job: identical ($(wc -l < caps/${s}__$job.alone.jsonl) events)"
    else
      echo "$s $job: DIFFERENT alone=$(wc -l < caps/${s}__$job.alone.jsonl) combined=$(wc -l < caps/${s}__$job.combined.jsonl) events"
    fi
  done
done
