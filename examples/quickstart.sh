#!/usr/bin/env bash
# paiq's quick start on a fresh Debian 12 machine (root): installs what it needs, starts the whole
# platform in one process (`paiq up`: embedded MongoDB-wire server, in-process bus, this machine's
# Docker engine as the one node) and runs examples/hello-world.json to its end.
#
#   bash examples/quickstart.sh          # run the demo, then stop paiq
#   bash examples/quickstart.sh --keep   # run the demo and keep paiq up (Ctrl-C to stop)
set -euo pipefail
cd "$(dirname "$0")/.."

keep=0
[ "${1:-}" = "--keep" ] && keep=1
log() { printf '[quickstart] %s\n' "$*" >&2; }

bash examples/setup-engine.sh
if [ ! -x .venv/bin/paiq ]; then
  # Debian's python3 makes no venv without python3-venv (ensurepip)
  if ! python3 -c 'import ensurepip' 2>/dev/null; then
    log "installing python3-venv"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  fi
  log "installing paiq into .venv"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -e .
fi

export PAIQ_DATA_DIR="${PAIQ_DATA_DIR:-$HOME/.paiq}"
export PAIQ_API="http://127.0.0.1:${PAIQ_API_PORT:-9186}"
mkdir -p "$PAIQ_DATA_DIR"
log "starting paiq (log: $PAIQ_DATA_DIR/paiq-up.log)"
.venv/bin/paiq up >"$PAIQ_DATA_DIR/paiq-up.log" 2>&1 &
up=$!
trap '[ $keep = 1 ] || { kill $up 2>/dev/null; wait $up 2>/dev/null; }' EXIT

for _ in $(seq 1 120); do
  .venv/bin/python -c "import urllib.request as u; u.urlopen('$PAIQ_API/healthz', timeout=2)" 2>/dev/null && break
  kill -0 $up 2>/dev/null || { log "paiq up exited:"; tail -20 "$PAIQ_DATA_DIR/paiq-up.log" >&2; exit 1; }
  sleep 0.5
done

# A job name is unique per user: give each run of the demo its own.
job="hello-world-$(date +%Y%m%d-%H%M%S)"
config=$(mktemp --suffix .json)
sed "s/\"jobName\": \"hello-world\"/\"jobName\": \"$job\"/" examples/hello-world.json >"$config"
log "submitting examples/hello-world.json as $job"
status=0
.venv/bin/paiq submit "$config" --wait || status=$?
rm -f "$config"
.venv/bin/paiq status "$job" || true
echo
log "what the task printed (paiq logs $job):"
.venv/bin/paiq logs "$job" || true

if [ $keep = 1 ]; then
  log "paiq is up at $PAIQ_API; try: .venv/bin/paiq jobs   (Ctrl-C to stop)"
  trap 'kill $up 2>/dev/null' INT TERM
  wait $up
fi
exit $status
