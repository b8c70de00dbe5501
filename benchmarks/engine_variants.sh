#!/usr/bin/env bash
# Issue 23: the GPU model process's variants side by side, one server at a time on the same host and model:
# the Server search (8 Locust processes, SLO 20 ms) and, with CLOSED=1, closed-loop HTTP/gRPC points at 16 and 128 users,
# with every thread's CPU (benchmarks/thread_cpu.py) and the server's own statistics in each record.
# Usage: benchmarks/engine_variants.sh REPO OUTDIR VARIANT...
#   variant NAME=ENV_AND_ARGS, e.g. 'threads=' 'inline=@inline' 'sw5000=TRAINSERVE_SERVE_SWITCH_US=5000'
#   '@tree=DIR' serves (and loads) with the trainserve of another checkout (e.g. bench-before, from git archive);
#   '@inline' serves a copy of REPO whose GPU model has one instance and runs every batch on the event loop
#   (config.pbtxt parameter inline_max_us 100000).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$1 out=$2; shift 2; mkdir -p "$out"
py=${PYTHON:-python3}
for v in "$@"; do
  name=${v%%=*} spec=${v#*=} r=$repo envs=() tree=.
  for w in $spec; do
    if [ "${w%%=*}" = "@tree" ]; then tree=${w#*=}
    elif [ "$w" = "@inline" ]; then
      r="$out/repo-inline"; rm -rf "$r"; cp -r "$repo" "$r"
      $py - "$r/${MODEL:-cnn_gpu}/config.pbtxt" <<'PY'
import re, sys
p = sys.argv[1]; s = open(p).read()
s = re.sub(r"count: \d+", "count: 1", s)
s += 'parameters {\n  key: "inline_max_us"\n  value {\n    string_value: "100000"\n  }\n}\n'
open(p, "w").write(s)
PY
    else envs+=("$w"); fi
  done
  d="$out/$name"; mkdir -p "$d"
  (cd "$tree" && exec env "${envs[@]}" $py -m trainserve serve --model-repository "$r" --device "${DEVICE:-cuda}" --http-port 18000 --grpc-port 18001 \
    --metrics-port 18002) > "$d/server.log" 2>&1 & s=$!
  $py benchmarks/wait_ready.py
  $py benchmarks/thread_cpu.py --pid $s --interval-s 5 --seconds 200 --out "$d/threads.json" > "$d/threads.log" 2>&1 & t=$!
  common=(--model "${MODEL:-cnn_gpu}" --metrics-url http://127.0.0.1:18002/metrics --runs-dir "$d/runs")
  (cd "$tree" && timeout 90 $py -m trainserve load --url 127.0.0.1:18000 "${common[@]}" --search --rate "${RATE:-12000}" --slo-p99-ms 20 --duration 60s \
    --processes 8 --run search) > "$d/search.log" 2>&1
  [ "${CLOSED:-0}" = 1 ] && for proto in http grpc; do for u in 16 128; do
    port=18000; [ $proto = grpc ] && port=18001
    (cd "$tree" && timeout 40 $py -m trainserve load --url 127.0.0.1:$port "${common[@]}" --protocol $proto --users $u --duration 8s --processes 8 \
      --run closed) > "$d/closed-$proto-$u.log" 2>&1
  done; done
  kill -TERM $s; wait $s; kill $t 2>/dev/null; wait $t 2>/dev/null
  echo "== $name ($spec)"; grep -h "req/s\|mean .* = client\|bounded" "$d/search.log" | head -4
  for f in "$d"/closed-*.log; do [ -f "$f" ] && echo "$(basename "$f" .log): $(grep -h 'req/s' "$f" | head -1)"; done
  tail -n 3 "$d/threads.log"
done
