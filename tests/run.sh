#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine as root: installs and starts what it needs
# (Docker engine, RabbitMQ, a Docker registry; SecantusDB comes with the Python dependencies),
# builds the test images, checks lint and types, then runs pytest. Extra arguments go to pytest.
#
# A Docker engine this run started itself (`nohup dockerd`, where no engine ran and systemd does not
# run one) is stopped when the run ends, unless PAIQ_KEEP_ENGINE=1 or another run of this script still
# uses it. An engine that was running before, or that systemd started, is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[tests/run.sh] %s\n' "$*" >&2; }

# Debian's packages the run needs (python3-venv: Debian's python3 makes no venv without it). The package
# lists are refreshed first, and only when something is to be installed. prometheus: promtool and the server
# the monitoring tests run on ports of their own (a prometheus.service the package starts is never used).
packages=(rabbitmq-server docker-registry apache2-utils debootstrap docker-compose chromium prometheus)
[ -x .venv/bin/python ] || packages+=(python3-venv)
# node and npm run OpenPAI's own v2 protocol code (tests/oracle/openpai_v2); any node >= 10 with npm >= 8 does
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
missing=()
for pkg in "${packages[@]}"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  apt-get update -qq
  # Beside Docker CE, Debian's docker.io (which docker-compose recommends) conflicts with it: never that one.
  keep_out=()
  dpkg -s docker-ce >/dev/null 2>&1 && keep_out=(docker.io-)
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" "${keep_out[@]}" >/dev/null
fi

# --- the Docker engine ------------------------------------------------------------------------------
ENGINE_USERS=/run/paiq-test-engine-users  # one file per run of this script that uses the engine now
mkdir -p "$ENGINE_USERS"
touch "$ENGINE_USERS/$$"
engine_pid_file=$(mktemp)
started_engine=""

stop_engine() {  # the dockerd this run started, once no other run of this script uses it
  rm -f "$ENGINE_USERS/$$" "$engine_pid_file"
  [ -n "$started_engine" ] || return 0
  if [ "${PAIQ_KEEP_ENGINE:-0}" = 1 ]; then
    log "leaving the Docker engine this run started running (PAIQ_KEEP_ENGINE=1; dockerd pid $started_engine)"
    return 0
  fi
  local other
  for other in "$ENGINE_USERS"/*; do
    [ -e "$other" ] || continue
    if kill -0 "$(basename "$other")" 2>/dev/null; then
      log "leaving the Docker engine this run started running: run $(basename "$other") still uses it"
      return 0
    fi
    rm -f "$other"  # a run that was killed
  done
  kill -0 "$started_engine" 2>/dev/null || return 0
  log "stopping the Docker engine this run started (dockerd pid $started_engine)"
  kill -TERM "$started_engine" 2>/dev/null || true
  for _ in $(seq 1 60); do kill -0 "$started_engine" 2>/dev/null || return 0; sleep 0.5; done
  log "dockerd did not stop within 30 s; killing it"
  kill -KILL "$started_engine" 2>/dev/null || true
}

cleanup() {
  local status=$?
  stop_test_broker
  stop_engine
  exit "$status"
}
trap cleanup EXIT
stop_test_broker() { :; }  # until the broker is started

PAIQ_ENGINE_PID_FILE=$engine_pid_file bash examples/setup-engine.sh
started_engine=$(cat "$engine_pid_file")
# The SSH tests' image: a debootstrapped Debian base with openssh-server, built here (minutes, once; a
# no-op while its inputs are unchanged) rather than inside a test's timeout.
log "building the test images the e2e tests run (paiq/sshd:test)"
bash tests/deploy/build-images.sh sshd

# A RabbitMQ node of this run alone, empty (the machine's own node, if any, is left alone).
source tests/testbroker.sh
start_test_broker

if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  python3 -m venv .venv
fi
log "installing paiq and its test dependencies into .venv (versions: tests/constraints.txt)"
.venv/bin/pip install -q --disable-pip-version-check -c tests/constraints.txt -e '.[test]'

# OpenPAI v1.8's protocol v2 code and the package versions its lock file pinned (a no-op when installed)
if [ ! -d tests/oracle/openpai_v2/node_modules ] \
    || [ tests/oracle/openpai_v2/package-lock.json -nt tests/oracle/openpai_v2/node_modules ]; then
  log "installing the OpenPAI v2 protocol oracle (npm ci --prefix tests/oracle/openpai_v2)"
  npm ci --prefix tests/oracle/openpai_v2 --no-audit --no-fund --loglevel=error >/dev/null
fi

log "ruff"
.venv/bin/ruff check shared services tests k8s
log "mypy (strict)"
.venv/bin/mypy
log "import contracts (lint-imports: pyproject.toml's [tool.importlinter])"
.venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
if [ $# -gt 0 ]; then
  log "pytest $*"
  .venv/bin/pytest -q --durations=25 "$@"
  exit
fi
# The whole suite in one pytest over PAIQ_TEST_WORKERS processes (pytest-xdist, default 3): most tests spend their
# time waiting (containers, outages, compose stacks), so three keep two cores busy (four saturate them: more of
# the tests' time bounds were missed, for no shorter run). A test file runs whole on one worker (--dist loadfile:
# a module's platform is started once).
log "pytest: ${PAIQ_TEST_WORKERS:-3} workers, a test file each at a time"
.venv/bin/pytest -q --durations=25 -n "${PAIQ_TEST_WORKERS:-3}" --dist loadfile
