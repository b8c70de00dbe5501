#!/usr/bin/env bash
# Screenshot of the Locust start form with trainserve's custom fields, for docs/.
# Usage: scripts/screenshot_locust.sh [OUT.png]   (needs /usr/bin/chromium; Python from $PYTHON or the venv)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/locust-ui.png}"
py="${PYTHON:-.venv/bin/python}"
[ -x "$py" ] || py=python3
port="$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$py" -m locust -f loadtest/locustfile.py --web-host 127.0.0.1 \
  --web-port "$port" --class-picker --model-name cnn_cpu --server-url 127.0.0.1:8000 >/dev/null 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/" >/dev/null && break
  sleep 0.2
done
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,2000 \
  --virtual-time-budget=5000 --screenshot="$out" "http://127.0.0.1:$port/" 2>/dev/null
echo "wrote $out"
