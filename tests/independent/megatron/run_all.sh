#!/bin/bash
# Regenerate every scenario capture and score commwatch replay against the truth.
set -e
cd "$(dirname "$0")"
ROOT=$(cd ../../.. && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
mkdir -p caps
rm -f caps/*.cwcap caps/*.truth.json caps/*.out caps/*.stats
for s in $($PY gen.py --list); do
  $PY gen.py "$s" "caps/$s.cwcap"
done
$PY score.py caps
