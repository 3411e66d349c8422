#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine as root: installs and starts what it needs
# (Docker engine, RabbitMQ, a Docker registry; SecantusDB comes with the Python dependencies),
# builds the test image, checks lint and types, then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[tests/run.sh] %s\n' "$*" >&2; }

bash examples/setup-engine.sh

missing=()
for pkg in rabbitmq-server docker-registry apache2-utils debootstrap docker-compose chromium; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# A RabbitMQ node of this run alone, empty (the machine's own node, if any, is left alone).
source tests/testbroker.sh
start_test_broker
trap stop_test_broker EXIT

if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  python3 -m venv .venv
fi
log "installing paiq and its test dependencies into .venv"
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]'

log "ruff"
.venv/bin/ruff check shared services tests
log "mypy (strict)"
.venv/bin/mypy
log "pytest"
.venv/bin/pytest -q "$@"
