#!/bin/bash
# Generate every scenario, replay it through commwatch, score strictly.
cd "$(dirname "$0")"
ROOT=$(cd ../../.. && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
CW=${CW:-$ROOT/.venv/bin/commwatch}
mkdir -p caps
SCN=${@:-$($PY gen.py --list)}
pairs=()
for s in $SCN; do
  $PY gen.py $s caps/$s.cwcap
  /usr/bin/time -f "$s replay wall %e s" $CW replay --stats caps/$s.cwcap > caps/$s.alerts.jsonl 2> caps/$s.stats.txt
  tail -2 caps/$s.stats.txt
  pairs+=(caps/$s.truth.json caps/$s.alerts.jsonl)
done
$PY score.py "${pairs[@]}" | tee results.md
# multi-job isolation (full run only): each job of a multi-job capture replayed alone vs in the combined capture
if [ $# -eq 0 ]; then
  ./isolate.sh $($PY gen.py --list | grep '^multi_') | tee isolate.log
fi
