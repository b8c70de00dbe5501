#!/usr/bin/env bash
# Screenshot of the Locust start form with trainserve's custom fields, for docs/.
# Usage: scripts/screenshot_locust.sh [OUT.png]   (needs /usr/bin/chromium and playwright: the test extra)
# The same Playwright setup as tests/browser/; scripts/screenshots.py also shoots a report page.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-.venv/bin/python}"
[ -x "$py" ] || py=python3
exec "$py" scripts/screenshots.py locust "${1:-docs/locust-ui.png}"
