#!/usr/bin/env bash
# The GPU measurements of docs/BENCHMARKS.md, one phase per table there (that file names machine and date).
# Usage: OUT=dir benchmarks/gpu_session.sh PHASE...
#   phases: env train train-cnn profile ddp1 train-cpu serve serve-cpu-host serve-cpu-small grpc serve-matrix sweep-transformer
#           export run example usermodel attribution repeats gpu-tier frontends frontends-ramp server-search perf23 perf23-switch
#           search-split engine capacity merge merge-alone merge-search cpu-frontends cpu-lone lone-gpu lone-twin h2grpc h2grpc-ratio h2-load
#           h2-search-grpc pin flow flow-gpu rates-http run-default search-default fsdp frontier-edge
# Each phase writes under $RESULTS (default /tmp/gpu-results, kept between calls on a warm machine: logs
# and JSON); a tarball of all of it is left at $OUT/results.tgz (one file, whatever the phase count).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench-out}"
R="${RESULTS:-/tmp/gpu-results}"; mkdir -p "$R" "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
py=${PYTHON:-python3}
# wheels carried to the GPU machine (onnxruntime-gpu, tritonclient, locust) live in /tmp/site there
[ -d /tmp/site ] && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
[ -d /tmp/site/bin ] && export PATH="/tmp/site/bin:$PATH"
step() { local name=$1 limit=$2; shift 2; echo "=== $name (limit ${limit}s)"; local t0=$SECONDS
  timeout "$limit" "$@" >"$R/$name.log" 2>&1; echo "rc=$? ${name} $((SECONDS-t0))s"; tail -n 4 "$R/$name.log"; }
# the perf23 phases' repository: the zoo CNN (small) as `trainserve export` writes it; made again when a previous
# call's cleanup (below) removed its ONNX files
p23="$R/runs/perf23/model_repository"
perf23_repo() { [ -f "$p23/cnn_gpu/1/model.onnx" ] || step perf23_export 120 bash -c "$py -m trainserve train \
  --model cnn --preset small --samples 256 --epochs 1 --batch-size 64 --device cpu --run perf23 --runs-dir '$R/runs' \
  && $py -m trainserve export --eval-samples 64 --run perf23 --runs-dir '$R/runs'"; }
for phase in "$@"; do case $phase in
env)
  step env 60 bash -c "nvidia-smi; $py -c 'import torch,onnxruntime as o; print(torch.__version__, torch.cuda.get_device_name(), o.__version__, o.get_available_providers())'; nproc" ;;
train)
  step train_bare 400 env OUT="$R" $py benchmarks/train_bare.py --suite gpu --quick
  step telemetry_check 80 env OUT="$R" $py benchmarks/telemetry_check.py ;;
profile)
  step train_profile_cnn 150 env OUT="$R" $py benchmarks/train_profile_gpu.py --model cnn
  step train_profile_transformer 120 env OUT="$R" $py benchmarks/train_profile_gpu.py --model transformer
  step compare_cnn 120 $py -m trainserve compare --model cnn --preset small --precision bf16 --batch-size 512 --steps 14 --warmup-steps 4 --samples 7168 --run cmp-cnn --runs-dir "$R/runs"
  step compare_transformer 180 $py -m trainserve compare --model transformer --preset small --precision bf16 --batch-size 128 --steps 10 --warmup-steps 3 --samples 1280 --run cmp-transformer --runs-dir "$R/runs" ;;
train-cnn)  # the CNN case alone: 5 alternating rounds, and 3 runs of each pipeline variant (sampler rates)
  step train_bare_cnn 420 env OUT="$R" $py benchmarks/train_bare.py --model cnn --preset small --batch 512 --precision bf16 --steps 500 --warmup 20 --device cuda --rounds 5 --component-rounds 3
  step telemetry_check 80 env OUT="$R" $py benchmarks/telemetry_check.py ;;
ddp1)
  step ddp_scaling_1gpu 150 env OUT="$R" $py benchmarks/ddp_scaling.py --nproc 1 ;;
train-cpu)
  step train_bare_cpu 240 env OUT="$R" $py benchmarks/train_bare.py --suite host-cpu ;;
serve)  # every embedded-server variant (serve_bench.VARIANTS) beside (a) and (c)
  step serve_bench 420 env OUT="$R" $py benchmarks/serve_bench.py --device cuda --preset small --rounds 2 --seconds 3 --variants default one_thread ;;
gpu-tier)  # pytest -m gpu (tests/gpu): CUDA training, NVML release, fp16 export, limits, the CUDA server; a missing
  # GPU or CUDA provider fails it (TRAINSERVE_REQUIRE_GPU=1) instead of skipping. $R/gpu_tier.{log,xml}
  step gpu_tier 420 env TRAINSERVE_REQUIRE_GPU=1 $py -m pytest -q -m gpu -p no:cacheprovider tests/gpu \
    --junitxml="$R/gpu_tier.xml" ;;
serve-tests)
  step serve_tests 150 $py -m pytest -q -x -p no:cacheprovider tests/serve ;;
serve-cpu-host)  # the CPU targets with the servers and (a) pinned to 2 cores, the clients on the others
  step serve_bench_cpu_host 300 env OUT="$R" $py benchmarks/serve_bench.py --device cpu --server-cpus 0-1 --rounds 3 --seconds 3 ;;
serve-cpu-small)  # the 16-core CPU target: cnn small, servers and (a) on 12 cores, clients on 4
  step serve_bench_cpu_small 300 env OUT="$R" $py benchmarks/serve_bench.py --device cpu --preset small --server-cpus 0-11 --rounds 2 --seconds 3 ;;
grpc)  # gRPC vs HTTP front end at c=16 batch 1, on the GPU model
  step grpc_vs_http_gpu 150 env OUT="$R/grpc-gpu" $py benchmarks/grpc_vs_http.py --device cuda --preset small --rounds 3 --seconds 5 --client-procs 8 --grpc-client sync stream
  ;;
serve-matrix)  # batching under concurrency: an older checkout (BEFORE, default bench-before) vs this tree; HTTP and gRPC, 1/16/64 users,
  # batch 1, CPU and GPU; servers on cores 0-7, client processes on the rest. $R/serve_matrix.{json,md}
  # ROUNDS (default 1) runs of each point, SECONDS (default 3) per window
  step serve_matrix "${LIMIT:-330}" env OUT="$R" $py benchmarks/serve_matrix.py --before "${BEFORE:-bench-before}" \
    --device cpu cuda --server-cpus 0-7 --rounds "${ROUNDS:-1}" --seconds "${SECONDS_PER_POINT:-3}" \
    --warmup "${WARMUP:-1}" ;;
frontends)  # issue 23: serve --frontends 1, 2, 4; batch-1 HTTP and gRPC at 16 and 64 users, the server's mean batch
  step frontends 590 env OUT="$R" $py benchmarks/frontends_bench.py --device cuda --frontends 1,2,4 --users 16,64 \
    --protocols http,grpc --duration-s 15 --processes 6 --out "$R/frontends" ;;
frontends-ramp)  # issue 23's target: batch-1 HTTP capacity within p99 <= 20 ms, --frontends 4 (default on 16 cores)
  step frontends_ramp 590 env OUT="$R" $py benchmarks/frontends_bench.py --device cuda --frontends 4 --users 64 \
    --protocols http --duration-s 15 --processes 8 --ramp --ramp-step-s 4 --ramp-max-users 192 --out "$R/frontends-ramp" ;;
perf23)  # busy-polling of the multi-front-end server (serve/engine/spin.py) off (before) vs as chosen
  # from the cores (after), one tree, no older checkout; servers on cores 0-9, clients on the rest. ~300 s.
  # GPU: --frontends 4, HTTP and gRPC at 1/16/128 users; CPU: the default front ends (2 on 10 cores), 1/16
  # users; CPU again with onnxruntime's own spinning (serve --spin) against without. $R/perf23-*/serve_matrix.{json,md}
  perf23_repo
  step perf23_gpu 170 env OUT="$R/perf23-gpu" $py benchmarks/serve_matrix.py --repository "$p23" --device cuda \
    --server-cpus 0-9 --users 1 16 128 --before-env TRAINSERVE_SERVE_SPIN=0 --before-args="--frontends 4" \
    --after-env TRAINSERVE_SERVE_SPIN=auto --after-args="--frontends 4"
  # the measured variant: front ends poll for answers with any number of requests in flight (SPIN=2) vs the default
  step perf23_gpu_any 130 env OUT="$R/perf23-gpu-any" $py benchmarks/serve_matrix.py --repository "$p23" --device cuda \
    --server-cpus 0-9 --users 16 128 --before-args="--frontends 4" --after-args="--frontends 4" \
    --before-env TRAINSERVE_SERVE_SPIN=auto --after-env TRAINSERVE_SERVE_SPIN=2
  step perf23_cpu 90 env OUT="$R/perf23-cpu" $py benchmarks/serve_matrix.py --repository "$p23" --device cpu \
    --server-cpus 0-9 --users 1 16 --before-env TRAINSERVE_SERVE_SPIN=0 --after-env TRAINSERVE_SERVE_SPIN=auto
  step perf23_cpu_ortspin 60 env OUT="$R/perf23-cpu-ortspin" $py benchmarks/serve_matrix.py --repository "$p23" \
    --device cpu --server-cpus 0-9 --users 1 16 --protocols http --after-args=--spin ;;
perf23-switch)  # the GIL switch interval of the server's processes, Python's 5 ms (before) vs the server's default
  # (serve/engine/spin.py SWITCH_US), --frontends 4, HTTP and gRPC at 1/16/128 users, 2 rounds; servers on cores 0-9
  perf23_repo
  step perf23_switch 300 env OUT="$R/perf23-switch" $py benchmarks/serve_matrix.py --repository "$p23" --device cuda \
    --server-cpus 0-9 --users 1 16 128 --rounds 2 --before-args="--frontends 4" --after-args="--frontends 4" \
    --before-env TRAINSERVE_SERVE_SWITCH_US=5000 ;;
search-split)  # issue 23: the Server search on the GPU server alone (--frontends auto, 8 Locust processes, SLO 20 ms),
  # the figure's latency split from the server's statistics of that rate (loadtest/search_shape.py): what bounds it
  perf23_repo
  step search_split 180 bash -c "$py -m trainserve serve --model-repository '$p23' --device cuda --http-port 18000 \
    --grpc-port 18001 --metrics-port 18002 > '$R/search_split_server.log' 2>&1 & s=\$!; \
    $py benchmarks/wait_ready.py; \
    $py benchmarks/thread_cpu.py --pid \$s --interval-s 5 --seconds 170 --out '$R/search_split_threads.json' \
      > '$R/search_split_threads.log' 2>&1 & t=\$!; \
    (sleep 30; command -v py-spy >/dev/null && py-spy record -p \$s --threads --idle --rate 200 --duration 10 \
      --format raw -o '$R/search_split_pyspy.txt' > '$R/search_split_pyspy.log' 2>&1) & \
    $py -m trainserve load --url 127.0.0.1:18000 --model cnn_gpu --search --rate ${RATE:-8000} --slo-p99-ms 20 \
    --duration 60s --processes 8 --metrics-url http://127.0.0.1:18002/metrics --run search-split --runs-dir '$R/runs'; \
    rc=\$?; kill -TERM \$s; wait \$s; kill \$t 2>/dev/null; exit \$rc" ;;
engine)  # issue 23, 2026-12-04: main at the session's start (BEFORE, default bench-before) against this tree: the Server
  # search twice (benchmarks/engine_variants.sh: threads' CPU, the server's split per rate), then the GPU serve matrix
  perf23_repo
  step engine_variants 420 benchmarks/engine_variants.sh "$p23" "$R/engine" before=@tree=$PWD/${BEFORE:-bench-before} after= after2=
  step engine_matrix 150 env OUT="$R/engine-matrix" $py benchmarks/serve_matrix.py --before "${BEFORE:-bench-before}" \
    --repository "$p23" --device cuda --server-cpus 0-9 --users 16 128 --before-args="--frontends 4" --after-args="--frontends 4" ;;
capacity)  # issue 23's target through the project's own load generator: closed loop at 128 and 192 users (8 Locust
  # processes, the server unpinned, --frontends auto), the Server search after them
  perf23_repo
  step capacity 300 bash -c "$py -m trainserve serve --model-repository '$p23' --device cuda --http-port 18000 \
    --grpc-port 18001 --metrics-port 18002 > '$R/capacity_server.log' 2>&1 & s=\$!; \
    $py benchmarks/wait_ready.py; \
    for u in 128 192; do $py -m trainserve load --url 127.0.0.1:18000 --model cnn_gpu --users \$u --duration 12s \
      --processes 8 --metrics-url http://127.0.0.1:18002/metrics --run capacity --runs-dir '$R/runs'; done; \
    $py -m trainserve load --url 127.0.0.1:18000 --model cnn_gpu --search --rate 16000 --slo-p99-ms 20 --duration 60s \
      --processes 8 --metrics-url http://127.0.0.1:18002/metrics --run capacity-search --runs-dir '$R/runs'; \
    rc=\$?; kill -TERM \$s; wait \$s; exit \$rc" ;;
merge)  # issue 23, 2026-12-05: main at the session's start (BEFORE, default bench-before) against this tree (front ends
  # merge one loop turn's requests; CPU sessions spun inside runs then, off by default since): onnxruntime's spinning in process (the CPU
  # target's in-process best), the serve matrix on CPU (default front ends) and GPU (--frontends 4), HTTP and gRPC,
  # servers on cores 0-9
  perf23_repo
  step ort_spin 100 $py benchmarks/ort_spin.py "$p23/cnn_cpu/1/model.onnx" --threads 10 --runs 300 --rounds 1
  step merge_cpu 150 env OUT="$R/merge-cpu" $py benchmarks/serve_matrix.py --before "${BEFORE:-bench-before}" \
    --repository "$p23" --device cpu --server-cpus 0-9 --users 1 16 --rounds 2
  step merge_gpu 200 env OUT="$R/merge-gpu" $py benchmarks/serve_matrix.py --before "${BEFORE:-bench-before}" \
    --repository "$p23" --device cuda --server-cpus 0-9 --users 1 16 128 --rounds 2 --before-args="--frontends 4" \
    --after-args="--frontends 4" ;;
merge-alone)  # merging alone on the GPU: TRAINSERVE_SERVE_MERGE=0 before, one tree
  perf23_repo
  step merge_alone 110 env OUT="$R/merge-alone" $py benchmarks/serve_matrix.py --repository "$p23" --device cuda \
    --server-cpus 0-9 --users 16 128 --before-env TRAINSERVE_SERVE_MERGE=0 --before-args="--frontends 4" \
    --after-args="--frontends 4" ;;
cpu-frontends)  # issue 23's CPU target (batch-1 p50 <= in-process best + 0.4 ms): a CPU model behind the default front
  # ends (2 on 10 cores: each request crosses to the model process) vs one process (no crossing), and the same with
  # onnxruntime spinning inside runs (TRAINSERVE_SERVE_ORT_SPIN=run); servers on cores 0-9; in process beside them
  perf23_repo
  step ort_spin_cpu 100 $py benchmarks/ort_spin.py "$p23/cnn_cpu/1/model.onnx" --threads 10 --runs 300 --rounds 2
  step cpu_frontends 150 env OUT="$R/cpu-frontends" $py benchmarks/serve_matrix.py --repository "$p23" --device cpu \
    --server-cpus 0-9 --users 1 16 --rounds 2 --before-args="--frontends 2" --after-args="--frontends 1"
  step cpu_frontends_spin 150 env OUT="$R/cpu-frontends-spin" $py benchmarks/serve_matrix.py --repository "$p23" \
    --device cpu --server-cpus 0-9 --users 1 16 --rounds 2 --before-args="--frontends 1" --after-args="--frontends 1" \
    --after-env TRAINSERVE_SERVE_ORT_SPIN=run
  # what the example run does to a CPU server: unpinned, clients on the same cores, the Server search (SLO 20 ms),
  # spinning inside runs off (the default) and on, one after the other
  for sp in off run; do
    step cpu_search_$sp 120 bash -c "TRAINSERVE_SERVE_ORT_SPIN=$sp $py -m trainserve serve --model-repository '$p23' \
      --device cpu --http-port 18000 --grpc-port 18001 --metrics-port 18002 > '$R/cpu_search_${sp}_server.log' 2>&1 & \
      s=\$!; $py benchmarks/wait_ready.py; $py -m trainserve load --url 127.0.0.1:18000 --model cnn_cpu --search \
      --rate 400 --slo-p99-ms 20 --duration 60s --processes 2 --metrics-url http://127.0.0.1:18002/metrics \
      --run cpu-search-$sp --runs-dir '$R/runs'; rc=\$?; kill -TERM \$s; wait \$s; exit \$rc"
  done ;;
cpu-lone)  # issue 23's CPU target (batch-1 p50 <= in-process best + 0.4 ms) on this tree: a CPU server in one process
  # by default, a lone request run on the loop, polling after an answer that left the batcher idle. Servers and the
  # in-process limits on cores 0-9, clients on the rest. BEFORE (default bench-before) is main before the change.
  perf23_repo
  step limits_cpu 90 taskset -c 0-9 $py -m trainserve limits --run perf23 --runs-dir "$R/runs" --device cpu --model cnn_cpu --budget-s 40
  step ort_spin_cpu 60 taskset -c 0-9 $py benchmarks/ort_spin.py "$p23/cnn_cpu/1/model.onnx" --threads 10 --runs 300 --rounds 1
  step lone_default 170 env OUT="$R/lone-default" $py benchmarks/serve_matrix.py --before "${BEFORE:-bench-before}" \
    --repository "$p23" --device cpu --server-cpus 0-9 --users 1 16 --rounds 2 --before-args="--frontends 2"
  step lone_fe1 90 env OUT="$R/lone-fe1" $py benchmarks/serve_matrix.py --before "${BEFORE:-bench-before}" \
    --repository "$p23" --device cpu --server-cpus 0-9 --users 1 --rounds 2 --before-args="--frontends 1"
  step lone_spin 170 env OUT="$R/lone-spin" $py benchmarks/serve_matrix.py --repository "$p23" --device cpu \
    --server-cpus 0-9 --users 1 16 --rounds 2 --after-env TRAINSERVE_SERVE_ORT_SPIN=run ;;
lone-gpu)  # the cpu-lone change where it also reaches: a GPU server's model process now polls after any answer that
  # left its batcher idle; main before it (BEFORE) vs this tree, --frontends 4, HTTP and gRPC, servers on cores 0-9
  perf23_repo
  step lone_gpu 200 env OUT="$R/lone-gpu" $py benchmarks/serve_matrix.py --before "${BEFORE:-bench-before}" \
    --repository "$p23" --device cuda --server-cpus 0-9 --users 1 16 128 --rounds 2 --before-args="--frontends 4" \
    --after-args="--frontends 4" ;;
lone-twin)  # the lone-run spinning twin (a CPU model's lone batch-1 request on a session that spins inside runs)
  # against the tree before it (PREV, default bench-prev), both one process; the in-process best beside it
  perf23_repo
  step limits_cpu 90 taskset -c 0-9 $py -m trainserve limits --run perf23 --runs-dir "$R/runs" --device cpu --model cnn_cpu --budget-s 40
  step lone_twin 170 env OUT="$R/lone-twin" $py benchmarks/serve_matrix.py --before "${PREV:-bench-prev}" \
    --repository "$p23" --device cpu --server-cpus 0-9 --users 1 16 --rounds 2 ;;
merge-search)  # issue 23's open-loop target on this tree: the Server search (--frontends auto, 8 Locust processes, SLO
  # 20 ms, first rate 16k, 90 s budget), every thread's CPU meanwhile and 10 s of py-spy: what bounds it now
  perf23_repo
  step merge_search 200 bash -c "$py -m trainserve serve --model-repository '$p23' --device cuda --http-port 18000 \
    --grpc-port 18001 --metrics-port 18002 > '$R/merge_search_server.log' 2>&1 & s=\$!; \
    $py benchmarks/wait_ready.py; \
    $py benchmarks/thread_cpu.py --pid \$s --interval-s 5 --seconds 150 --out '$R/merge_search_threads.json' \
      > '$R/merge_search_threads.log' 2>&1 & t=\$!; \
    (sleep 40; command -v py-spy >/dev/null && py-spy record -p \$s --threads --idle --rate 200 --duration 10 \
      --format raw -o '$R/merge_search_pyspy.txt' > '$R/merge_search_pyspy.log' 2>&1) & \
    $py -m trainserve load --url 127.0.0.1:18000 --model cnn_gpu --search --rate 16000 --slo-p99-ms 20 \
    --duration 90s --processes 8 --metrics-url http://127.0.0.1:18002/metrics --run merge-search --runs-dir '$R/runs'; \
    rc=\$?; kill -TERM \$s; wait \$s; kill \$t 2>/dev/null; exit \$rc" ;;
h2grpc)  # gRPC served by serve/protocol/grpc_h2.py (after) against grpc.aio (before:
  # TRAINSERVE_SERVE_GRPC=aio), one tree, so HTTP is the control; GPU with --frontends 4, CPU one process; servers on 0-9
  perf23_repo
  step h2_gpu 240 env OUT="$R/h2-gpu" $py benchmarks/serve_matrix.py --repository "$p23" --device cuda \
    --server-cpus 0-9 --users 1 16 128 --rounds 2 --before-env TRAINSERVE_SERVE_GRPC=aio --before-args="--frontends 4" \
    --after-args="--frontends 4"
  step h2_cpu 200 env OUT="$R/h2-cpu" $py benchmarks/serve_matrix.py --repository "$p23" --device cpu \
    --server-cpus 0-9 --users 1 16 --rounds 2 --before-env TRAINSERVE_SERVE_GRPC=aio ;;
h2grpc-ratio)  # the issue's measure: one server (the default front ends), HTTP and gRPC points alternating, 16 users in
  # 8 client processes, unary and streaming gRPC clients
  step grpc_vs_http_h2 220 env OUT="$R/grpc-h2" $py benchmarks/grpc_vs_http.py --device cuda --preset small --rounds 3 \
    --seconds 5 --client-procs 8 --grpc-client sync stream ;;
h2-load)  # the project's own load generator against this tree: a CPU server on cores 0-9 (one process), 1 user for 30 s
  # over HTTP, then gRPC, twice each, clients on 10-15, beside the in-process best on the same cores
  perf23_repo
  step limits_cpu 90 taskset -c 0-9 $py -m trainserve limits --run perf23 --runs-dir "$R/runs" --device cpu --model cnn_cpu --budget-s 40
  step h2_load_cpu 240 bash -c "taskset -c 0-9 $py -m trainserve serve --model-repository '$p23' --device cpu \
    --http-port 18000 --grpc-port 18001 --metrics-port 18002 > '$R/h2_load_cpu_server.log' 2>&1 & s=\$!; \
    $py benchmarks/wait_ready.py; rc=0; \
    for r in 1 2; do for pp in http:18000 grpc:18001; do taskset -c 10-15 $py -m trainserve load \
      --url 127.0.0.1:\${pp#*:} --protocol \${pp%%:*} --model cnn_cpu --users 1 --duration 30s --processes 1 \
      --run h2-load-cpu-\${pp%%:*}-r\$r --metrics-url http://127.0.0.1:18002/metrics --runs-dir '$R/runs' || rc=1; \
    done; done; kill -TERM \$s; wait \$s; exit \$rc" ;;
h2-search-grpc)  # the GPU's Server search over gRPC (needs onnxruntime-gpu)
  perf23_repo
  step h2_search_grpc 200 bash -c "$py -m trainserve serve --model-repository '$p23' --device cuda --http-port 18000 \
    --grpc-port 18001 --metrics-port 18002 > '$R/h2_search_server.log' 2>&1 & s=\$!; $py benchmarks/wait_ready.py; \
    $py -m trainserve load --url 127.0.0.1:18001 --protocol grpc --model cnn_gpu --search --rate 16000 \
    --slo-p99-ms 20 --duration 90s --processes 8 --metrics-url http://127.0.0.1:18002/metrics --run h2-search-grpc \
    --runs-dir '$R/runs'; rc=\$?; kill -TERM \$s; wait \$s; exit \$rc" ;;
pin)  # intra-op worker threads pinned one per usable core, in process (ort_spin.py --pin), 4/6/10 threads; the serving
  # experiment it went with (TRAINSERVE_SERVE_PIN, phases pin-load / pin-all) was measured at 1e56ce4 and reverted
  perf23_repo
  step topology 10 bash -c "lscpu; grep . /sys/devices/system/cpu/cpu*/topology/thread_siblings_list"
  step limits_cpu 90 taskset -c 0-9 $py -m trainserve limits --run perf23 --runs-dir "$R/runs" --device cpu --model cnn_cpu --budget-s 40
  step ort_pin 150 taskset -c 0-9 $py benchmarks/ort_spin.py "$p23/cnn_cpu/1/model.onnx" --threads 4,6,10 --runs 200 \
    --rounds 2 --gaps-ms 0,0.3,2 --pin ;;
flow)  # the gRPC front end's consumption-based flow control (5883c98) against the tree before it (PREV, default
  # bench-prev), a CPU server on cores 0-9, HTTP as the control
  perf23_repo
  step flow_cpu 200 env OUT="$R/flow-cpu" $py benchmarks/serve_matrix.py --before "${PREV:-bench-prev}" \
    --repository "$p23" --device cpu --server-cpus 0-9 --users 1 16 64 --rounds 2 ;;
rates-http)  # the GPU server at fixed open-loop rates (16k, 20k, 24k req/s, 30 s each, 8 Locust processes): p99 at
  # each, where one Server search's single failing trial may have stopped it early
  perf23_repo
  step rates_http 240 bash -c "$py -m trainserve serve --model-repository '$p23' --device cuda --http-port 18000 \
    --grpc-port 18001 --metrics-port 18002 > '$R/rates_http_server.log' 2>&1 & s=\$!; $py benchmarks/wait_ready.py; \
    rc=0; for r in 16000 20000 24000; do $py -m trainserve load --url 127.0.0.1:18000 --model cnn_gpu --rate \$r \
      --duration 30s --processes 8 --metrics-url http://127.0.0.1:18002/metrics --run rates-http-\$r \
      --runs-dir '$R/runs' || rc=1; done; kill -TERM \$s; wait \$s; exit \$rc" ;;
flow-gpu)  # the same on the GPU model (needs onnxruntime-gpu): front ends by default (--frontends auto)
  perf23_repo
  step flow_gpu 300 env OUT="$R/flow-gpu" $py benchmarks/serve_matrix.py --before "${PREV:-bench-prev}" \
    --repository "$p23" --device cuda --users 1 16 64 --rounds 2 ;;
sweep-transformer)  # the training sweep of the small transformer on both devices (the cnn's is in `run`)
  step sweep_transformer 300 $py -m trainserve compare --model transformer --preset small --sweep --device cpu,cuda --sweep-budget-s 60 --run sweep-transformer --runs-dir "$R/runs" ;;
export)
  step export_gpu 150 env OUT="$R" $py benchmarks/export_gpu.py --preset small --repeats 20 ;;
attribution)  # issue 23 items 3-4: client CPU, latency split and bound per point, through `trainserve load`
  step attribution_check 560 env OUT="$R" $py benchmarks/attribution_check.py --device cuda --preset small --seconds 10 --ramp-step-s 15 --ramp-max-users 32 ;;
run)
  step run 580 $py -m trainserve run --run gpu-example --runs-dir "$R/runs" ;;
example)  # docs/example-report: the main job on digits, trained to 95% on each device (2 seeds), every served point
  # 3 times, priced, planned for 10k req/s within p99 20 ms. ~820 s: a call stopped at its limit is finished by the
  # next with RESUME=1 (the run's --resume, on the same warm machine)
  step example "${LIMIT:-570}" $py -m trainserve run --run gpu-example --runs-dir "$R/runs" --dataset digits \
    --target-accuracy 0.95 --seeds 2 --sweep-budget-s 30 --qps 10000 --slo-p99-ms 20 --repeats 3 ${RESUME:+--resume} ;;
usermodel)  # issue 25: the example model of one's own (examples/resnet_small.py), every stage, priced and planned
  step usermodel 580 $py -m trainserve run --model examples/resnet_small.py:build --input-shape 3,64,64 \
    --num-classes 10 --qps 1000 --run gpu-usermodel --runs-dir "$R/runs" ;;
repeats)  # issue 24: every served operating point 3 times (mean and 95% CI, the noise table), on --quick's budget
  step repeats 580 $py -m trainserve run --quick --repeats 3 --run gpu-repeats --runs-dir "$R/runs" --slo-p99-ms 20 ;;
server-search)  # issue 24 item 1: the Server search from a master and workers on the GPU (auto --processes), SLO 20 ms
  step server_search_run 580 $py -m trainserve run --quick --run gpu-search --runs-dir "$R/runs" --slo-p99-ms 20
  step server_search 60 env OUT="$R" $py benchmarks/server_search.py --run-dir "$R/runs/gpu-search" ;;
run-default)  # the default job as a new user runs it (every option at its default); RESUME=1 finishes a stopped one
  step run_default "${LIMIT:-560}" $py -m trainserve run --run gpu-default --runs-dir "$R/runs" ${RESUME:+--resume} ;;
search-default)  # the Server search with its defaults against the default run's GPU server, then a 150 s search
  # beside it; $R/runs/gpu-default/load/search-{default,150s}.json
  rep="$R/runs/gpu-default/model_repository"
  $py -m trainserve serve --model-repository "$rep" --device cuda --http-port 18000 --grpc-port 18001 \
    --metrics-port 18002 > "$R/search_server.log" 2>&1 &
  srv=$!
  $py benchmarks/wait_ready.py --timeout-s 120
  # PAIRS (default 1) pairs, alternating on one server so its drift falls on both; targets search-{default,150s}-K
  for k in $(seq 1 "${PAIRS:-1}"); do
    step search_default_$k 200 $py -m trainserve load --url 127.0.0.1:18000 --model cnn_gpu --search --slo-p99-ms 20 \
      --run gpu-default --runs-dir "$R/runs" --target search-default-$k --metrics-url http://127.0.0.1:18002/metrics
    step search_150s_$k 260 $py -m trainserve load --url 127.0.0.1:18000 --model cnn_gpu --search --slo-p99-ms 20 \
      --duration 150s --run gpu-default --runs-dir "$R/runs" --target search-150s-$k \
      --metrics-url http://127.0.0.1:18002/metrics
  done
  kill $srv; wait $srv 2>/dev/null ;;
fsdp)  # one GPU as N=1, DDP against FSDP2 --shard and --shard --offload, 40 steps each of the
  # small transformer in bf16; each rank's GPU peak and split, and the host's share under --offload ($R/fsdp_memory.*)
  for v in ddp: shard:--shard offload:--shard\ --offload; do
    step "fsdp_${v%%:*}" 240 bash -c "$py -m trainserve train --model transformer --preset small --precision bf16 \
      --batch-size 64 --samples 4096 --steps 40 --device cuda --nproc 1 ${v#*:} --run fsdp-${v%%:*} \
      --runs-dir '$R/runs' --overwrite"
  done
  step fsdp_memory 60 env OUT="$R" $py benchmarks/fsdp_memory.py --runs-dir "$R/runs" fsdp-ddp fsdp-shard fsdp-offload ;;
frontier-edge)  # the transformer's frontier with a 240 s budget, every series' edge bracketed (measured
  # just below the predicted edge, and the next size above measured not to fit); $R/frontier-edge.json
  step frontier_edge "${LIMIT:-420}" $py -m trainserve frontier --device cuda --budget-s "${FRONTIER_BUDGET:-240}" --run gpu-frontier --runs-dir "$R/runs"
  cp "$R/runs/gpu-frontier/frontier/cuda.json" "$R/frontier-edge.json" ;;
*) echo "unknown phase $phase"; exit 2 ;;
esac; done
# checkpoints and models stay on the machine (a later call on it may resume a run or reuse a repository);
# the tarball leaves them out to stay within what a call brings back
tar czf "$OUT/results.tgz" --exclude='*.pt' --exclude='*.onnx' -C "$(dirname "$R")" "$(basename "$R")" && ls -la "$OUT"
