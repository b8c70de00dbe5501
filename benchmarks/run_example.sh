#!/usr/bin/env bash
# The example report: `trainserve run` with its defaults (cnn/small on a GPU machine; CPU, plus the
# GPU when there is one). Heavy artifacts (checkpoints, ONNX files) stay in a scratch folder; $OUT
# (default ./bench-out) gets what is worth keeping:
#   $OUT/report/            report.html, report.md, summary.json (the JSON results), *.png
#   $OUT/records/           every profile record and speedup.json (train/, compare/, load/)
#   $OUT/logs/              one log per stage
#   $OUT/run.log            the progress lines
# Extra arguments go to `trainserve run` (e.g. --quick, --model transformer).
#   PYTHON=python3.12 OUT=/tmp/out benchmarks/run_example.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-./bench-out}"
PY="${PYTHON:-python}"
RUNS="$(mktemp -d)"
trap 'rm -rf "$RUNS"' EXIT
mkdir -p "$OUT"
status=0
"$PY" -m trainserve run --run example --runs-dir "$RUNS" "$@" 2>&1 | tee "$OUT/run.log" || status=$?
run="$RUNS/example"
rm -rf "$OUT/report" "$OUT/records" "$OUT/logs"
[ -d "$run/logs" ] && cp -r "$run/logs" "$OUT/logs"
[ -d "$run/report" ] && cp -r "$run/report" "$OUT/report"
for part in train compare load export; do
  [ -d "$run/$part" ] || continue
  mkdir -p "$OUT/records/$part"
  find "$run/$part" -maxdepth 1 -name '*.json' -exec cp {} "$OUT/records/$part/" \;
done
echo "example report: $OUT/report/report.html"
exit "$status"
