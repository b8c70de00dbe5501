#!/usr/bin/env bash
# onnxruntime-gpu for the lent GPU machine in four device calls instead of five.
#
# ../shared/tools/ort-gpu-chunks splits the wheel (~244 MiB) into five ~55 MiB folders .ortgpu.0-4. The
# wheel's own compression is weak on its CUDA provider library; its contents re-packed as one xz tarball are
# ~195 MiB, which fits four calls of 57 MiB (the working tree, ~6 MiB, travels beside each part). Run from the
# project root after ort-gpu-chunks; it writes the ignored folders .ortgpuxz.0-3 (about a minute on 2 cores).
# Then, on one warm machine (30 s between calls at most):
#
#   run k (k = 0..2): carry [".ortgpuxz.k"], command: mkdir -p /tmp/ortw && cp .ortgpuxz.k/* /tmp/ortw/
#   run 3:            carry [".ortgpuxz.3", ".whl"], command:
#       cp .ortgpuxz.3/* /tmp/ortw/ && mkdir -p /tmp/site && python3 -m pip install -q --no-index --no-deps \
#         --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#       && cat /tmp/ortw/xzpart.* | xz -d | tar x -C /tmp/site && export PYTHONPATH=/tmp/site \
#       && python3 -c "import torch, onnxruntime as o; print(o.__version__, o.get_available_providers())" && ...
#
# (.whl: Locust, tritonclient and their needs, ~24 MiB; the last part is small enough to travel with them.)
# As with the five chunks: import torch before onnxruntime, and check session.get_providers().
set -euo pipefail
root="$(git rev-parse --show-toplevel)"
cd "$root"
ls .ortgpu.[0-9]/part.* >/dev/null 2>&1 || { echo "no .ortgpu.N folders: run ../shared/tools/ort-gpu-chunks first" >&2; exit 2; }
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cat .ortgpu.[0-9]/part.* > "$work/ort.whl"
mkdir "$work/x" && (cd "$work/x" && python3 -m zipfile -e ../ort.whl .)
tar cf - -C "$work/x" . | xz -T0 -6 > "$work/ort.tar.xz"
rm -rf .ortgpuxz.*
(cd "$work" && split -b 57M -d -a 1 ort.tar.xz xzpart.)
for p in "$work"/xzpart.*; do k="${p##*.}"; mkdir -p ".ortgpuxz.$k"; mv "$p" ".ortgpuxz.$k/"; done
for f in .ortgpuxz.*/xzpart.*; do echo "staged: $f ($(stat -c %s "$f") bytes)"; done
