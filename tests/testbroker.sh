#!/usr/bin/env bash
# The test run's own RabbitMQ node, started fresh by tests/run.sh (sourced there; needs the
# rabbitmq-server package's binaries, run as root):
#   node     paiq-test@localhost, its AMQP and distribution ports chosen free at start
#   data     $PAIQ_TEST_RABBITMQ_DIR (default /var/tmp/paiq-test-rabbitmq): mnesia, logs, its own
#            Erlang cookie (HOME), emptied at every start
# A node's data grows with every durable queue the tests declare, and a RabbitMQ node with thousands
# of leftover queues can take minutes to boot or not finish at all (seen: the machine's own node stuck
# in vhost recovery, 0% CPU, no AMQP listener, while `rabbitmq-diagnostics ping` answered). So the
# suite never relies on the machine's own node: a node of its own, empty, every run, and "started"
# means its AMQP port accepts connections, not that the Erlang VM answers.
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

start_test_broker() {
  export PAIQ_TEST_RABBITMQ_DIR=${PAIQ_TEST_RABBITMQ_DIR:-/var/tmp/paiq-test-rabbitmq}
  export PAIQ_TEST_RABBITMQ_NODE=paiq-test@localhost
  local dir=$PAIQ_TEST_RABBITMQ_DIR port
  if [ -f "$dir/amqp_port" ] && test_broker_ctl -q ping >/dev/null 2>&1; then
    log "stopping the previous run's RabbitMQ node"
    test_broker_ctl -q stop >/dev/null 2>&1 || true
  fi
  if [ -f "$dir/rabbitmq.pid" ]; then  # a node that did not answer: its VM may still hold the ports
    kill -9 "$(cat "$dir/rabbitmq.pid")" 2>/dev/null || true
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
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
  export PAIQ_TEST_AMQP_URL="amqp://guest:guest@127.0.0.1:$port/"
}
