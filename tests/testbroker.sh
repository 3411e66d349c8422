#!/usr/bin/env bash
# The test run's own RabbitMQ node, started fresh by tests/run.sh (sourced there; needs the
# rabbitmq-server package's binaries, run as root):
#   node     paiq-test-<run's pid>@localhost, its AMQP and distribution ports chosen free at start
#   data     $PAIQ_TEST_RABBITMQ_ROOT/<run's pid> (root default /var/tmp/paiq-test-rabbitmq): mnesia,
#            logs, its own Erlang cookie (HOME); stopped and deleted when the run ends
# Runs side by side never share a node; a run that was killed leaves a node that the next run stops.
# A node's data grows with every durable queue the tests declare, and a RabbitMQ node with thousands
# of leftover queues can take minutes to boot or not finish at all (seen: the machine's own node stuck
# in vhost recovery, 0% CPU, no AMQP listener, while `rabbitmq-diagnostics ping` answered). So the
# suite never relies on the machine's own node: a node of its own, empty, every run, and "started"
# means its AMQP port accepts connections, not that the Erlang VM answers.
# Its one user is paiq-test, with a password made at start (RabbitMQ's guest is deleted).
# Exports PAIQ_TEST_AMQP_URL (read by tests/conftest.py), PAIQ_TEST_RABBITMQ_NODE and
# PAIQ_TEST_RABBITMQ_DIR (for tests that call rabbitmqctl: tests/infra.py rabbitmqctl()).

TEST_RABBITMQ_BIN=/usr/lib/rabbitmq/bin

test_broker_env() {  # the environment the node and every CLI call against it run with
  local dir=$1
  env -u RABBITMQ_CONFIG_FILES HOME="$dir" \
    RABBITMQ_NODENAME="$PAIQ_TEST_RABBITMQ_NODE" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT="$(cat "$dir/amqp_port" 2>/dev/null || echo 0)" \
    RABBITMQ_DIST_PORT="$(cat "$dir/dist_port" 2>/dev/null || echo 0)" \
    RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log" RABBITMQ_PID_FILE="$dir/rabbitmq.pid" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf" \
    RABBITMQ_CONFIG_FILE="$dir/rabbitmq" RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config" "${@:2}"
}

test_broker_ctl() {  # rabbitmqctl against the test node
  test_broker_env "$PAIQ_TEST_RABBITMQ_DIR" "$TEST_RABBITMQ_BIN/rabbitmqctl" -n "$PAIQ_TEST_RABBITMQ_NODE" "$@"
}

pid_in() {  # the process id written in file $1, or nothing (never 0: `kill 0` means the whole group)
  local pid
  pid=$(cat "$1" 2>/dev/null || true)
  [[ "$pid" =~ ^[1-9][0-9]*$ ]] && echo "$pid"
}

kill_node_of() {  # $1: a node's data directory
  local pid
  # (a node that is gone already is fine: under `set -e` a failing kill must not end the run)
  if pid=$(pid_in "$1/rabbitmq.pid"); then kill -9 "$pid" 2>/dev/null || true; fi
  return 0
}

reap_test_brokers() {  # nodes of runs that ended without stopping theirs (killed)
  local dir run
  for dir in "$PAIQ_TEST_RABBITMQ_ROOT"/*/; do
    [ -f "$dir/run.pid" ] || continue
    if ! { run=$(pid_in "$dir/run.pid") && kill -0 "$run" 2>/dev/null; }; then
      kill_node_of "$dir"
      rm -rf "$dir"
    fi
  done
}

start_test_broker() {
  export PAIQ_TEST_RABBITMQ_ROOT=${PAIQ_TEST_RABBITMQ_ROOT:-/var/tmp/paiq-test-rabbitmq}
  export PAIQ_TEST_RABBITMQ_DIR=$PAIQ_TEST_RABBITMQ_ROOT/$$
  export PAIQ_TEST_RABBITMQ_NODE=paiq-test-$$@localhost
  local dir=$PAIQ_TEST_RABBITMQ_DIR port
  mkdir -p "$PAIQ_TEST_RABBITMQ_ROOT"
  reap_test_brokers
  rm -rf "$dir"
  mkdir -p "$dir"
  echo $$ >"$dir/run.pid"
  echo '[].' >"$dir/enabled_plugins"
  python3 - "$dir" <<'PY'
import socket, sys
def free(ports):
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    sys.exit("no free port for the test RabbitMQ node")
# The CLI's own distribution ports are the node's + 10000..10010: keep those under 65536.
open(f"{sys.argv[1]}/amqp_port", "w").write(str(free([0])))
open(f"{sys.argv[1]}/dist_port", "w").write(str(free(range(25700, 26000))))
PY
  port=$(cat "$dir/amqp_port")
  log "starting the test run's RabbitMQ node $PAIQ_TEST_RABBITMQ_NODE on 127.0.0.1:$port (data: $dir)"
  test_broker_env "$dir" "$TEST_RABBITMQ_BIN/rabbitmq-server" -detached >"$dir/start.log" 2>&1 || true
  if ! test_broker_ctl -q wait "$dir/rabbitmq.pid" --timeout 120 >/dev/null 2>&1 \
      || ! timeout 30 bash -c "until (: </dev/tcp/127.0.0.1/$port) 2>/dev/null; do sleep 0.2; done"; then
    log "the test RabbitMQ node did not start; its logs:"
    tail -n 40 "$dir"/log/*.log "$dir/start.log" >&2 2>/dev/null || true
    exit 1
  fi
  # paiq never logs in as guest (shared.settings.syntax.check_amqp_url): a user of the run's own, and no guest
  local password
  password=$(python3 -c 'import secrets; print(secrets.token_hex(24))')  # never a leading "-" (rabbitmqctl)
  test_broker_ctl -q add_user paiq-test "$password" >/dev/null
  test_broker_ctl -q set_permissions -p / paiq-test '.*' '.*' '.*' >/dev/null
  test_broker_ctl -q delete_user guest >/dev/null
  export PAIQ_TEST_AMQP_URL="amqp://paiq-test:$password@127.0.0.1:$port/"
}

stop_test_broker() {
  [ -n "${PAIQ_TEST_RABBITMQ_DIR:-}" ] && [ -d "$PAIQ_TEST_RABBITMQ_DIR" ] || return 0
  test_broker_ctl -q stop >/dev/null 2>&1 || kill_node_of "$PAIQ_TEST_RABBITMQ_DIR"
  rm -rf "$PAIQ_TEST_RABBITMQ_DIR"
}
