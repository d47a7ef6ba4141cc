#!/usr/bin/env bash
# Generate every "fleet" scenario, replay it through commwatch, score strictly.
#   [SEED=N] bash tests/independent/fleet/run_all.sh [SCENARIO-PREFIX ...]
# Writes caps/ (captures, truths, alerts, replay stderr) and results.md / results.json here.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
PY="$ROOT/.venv/bin/python"
CW="$ROOT/.venv/bin/commwatch"
CAPS="$HERE/caps"
mkdir -p "$CAPS"
t0=$(date +%s)
nice -n 15 "$PY" "$HERE/gen.py" --out "$CAPS" --seed "${SEED:-1}" "$@" | tee "$CAPS/gen.log"
t1=$(date +%s)
pairs=()
malformed=0
for truth in "$CAPS"/*.truth.json; do
  name="$(basename "$truth" .truth.json)"
  if [ "$#" -gt 0 ]; then
    keep=0; for p in "$@"; do case "$name" in "$p"*) keep=1;; esac; done
    [ "$keep" = 1 ] || continue
  fi
  nice -n 15 "$CW" replay --stats "$CAPS/$name.cwcap" > "$CAPS/$name.alerts.jsonl" 2> "$CAPS/$name.stderr"
  if grep -Eiq 'malformed|dead.?letter|invalid|error|skipp' "$CAPS/$name.stderr"; then
    echo "!! $name: replay complained:"; cat "$CAPS/$name.stderr"; malformed=1
  fi
  printf '%-28s %s\n' "$name" "$(tail -1 "$CAPS/$name.stderr")"
  pairs+=("$truth" "$CAPS/$name.alerts.jsonl")
done
t2=$(date +%s)
nice -n 15 "$PY" "$HERE/score.py" --out "$HERE" "${pairs[@]}"
echo
echo "generate $((t1 - t0)) s, replay $((t2 - t1)) s, total $(( $(date +%s) - t0 )) s"
[ "$malformed" = 0 ] || { echo "replay reported malformed input (see above)"; exit 2; }
