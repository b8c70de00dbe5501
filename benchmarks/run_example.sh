#!/usr/bin/env bash
# The example report: `trainserve run` with its defaults (cnn/small; CPU, plus the GPU when there is
# one), everything written under $OUT (default ./bench-out):
#   $OUT/runs/example/...      the whole run (train, compare, export, model_repository, load, logs)
#   $OUT/report/               report.html, report.md, summary.json (the JSON results), *.png
#   $OUT/run.log               the progress lines
# Extra arguments go to `trainserve run` (e.g. --quick, --model transformer).
#   PYTHON=python3.12 OUT=/tmp/out benchmarks/run_example.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-./bench-out}"
PY="${PYTHON:-python}"
mkdir -p "$OUT"
"$PY" -m trainserve run --run example --runs-dir "$OUT/runs" "$@" 2>&1 | tee "$OUT/run.log"
rm -rf "$OUT/report"
cp -r "$OUT/runs/example/report" "$OUT/report"
echo "example report: $OUT/report/report.html"
