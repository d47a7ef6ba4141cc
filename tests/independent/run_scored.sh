#!/usr/bin/env bash
# The runner of the generators that write `--out DIR --seed N [PREFIX ...]` (ops, realworld,
# fleet): generate every scenario, replay each capture through commwatch, score strictly.
#   bash tests/independent/run_scored.sh FOLDER DEFAULT_SEED [SCENARIO-PREFIX ...]   ($SEED overrides)
# Writes FOLDER/caps/ (captures, truths, alerts, replay stderr) and FOLDER/results.md / .json.
# Runs niced: the machine is shared. Two runs of one folder at once overwrite each other's captures.
set -euo pipefail
HERE="$(cd "$1" && pwd)"
SEED="${SEED:-$2}"
shift 2
ROOT="$(cd "$HERE/../../.." && pwd)"
PY="$ROOT/.venv/bin/python"
CW="$ROOT/.venv/bin/commwatch"
CAPS="$HERE/caps"
mkdir -p "$CAPS"
t0=$(date +%s)
nice -n 15 "$PY" "$HERE/gen.py" --out "$CAPS" --seed "$SEED" "$@" | tee "$CAPS/gen.log"
t1=$(date +%s)
pairs=()
malformed=0
for truth in "$CAPS"/*.truth.json; do
  name="$(basename "$truth" .truth.json)"
  if [ "$#" -gt 0 ]; then
    keep=0; for p in "$@"; do case "$name" in "$p"*) keep=1;; esac; done
    [ "$keep" = 1 ] || continue
  fi
  # replay reports malformed/dead-lettered messages on stderr; there must be none
  nice -n 15 "$CW" replay --stats "$CAPS/$name.cwcap" > "$CAPS/$name.alerts.jsonl" 2> "$CAPS/$name.stderr"
  if grep -Eiq 'malformed|dead.?letter|invalid|error|skipp' "$CAPS/$name.stderr"; then
    echo "!! $name: replay complained:"; cat "$CAPS/$name.stderr"; malformed=1
  fi
  printf '%-36s %s\n' "$name" "$(tail -1 "$CAPS/$name.stderr")"
  pairs+=("$truth" "$CAPS/$name.alerts.jsonl")
done
t2=$(date +%s)
nice -n 15 "$PY" "$HERE/score.py" --out "$HERE" "${pairs[@]}"
echo
echo "generate $((t1 - t0)) s, replay $((t2 - t1)) s, total $(( $(date +%s) - t0 )) s"
[ "$malformed" = 0 ] || { echo "replay reported malformed input (see above)"; exit 2; }
