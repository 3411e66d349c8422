"""Settings read once from an injected mapping: defaults, parsing, and errors that name the variable."""

from __future__ import annotations

import os
from operator import attrgetter
from pathlib import Path
from types import SimpleNamespace

import pytest

from shared.errors import SettingsError
from shared.jobconfig.limits import LIMIT_SETTINGS, JobLimits
from shared.settings.model import CliSettings, JobLimitSettings, Settings, parse_gpus
from shared.settings.refusals import bounds, settings_error
from shared.settings.source import every_variable, variables
from shared.settings.syntax import node_id_of_host

pytestmark = pytest.mark.unit

# Values that would otherwise come from the machine (host name, CPU count, memory).
BASE = {"PAIQ_NODE_ID": "n1", "PAIQ_NODE_CPUS": "8", "PAIQ_NODE_MEMORY_MB": "16384",
        "PAIQ_DATA_DIR": "/var/lib/paiq"}


def from_env(**env: str) -> Settings:
    return Settings.from_env({**BASE, **env})


def test_defaults() -> None:
    s = from_env()
    assert s.mongodb_uri is None and s.amqp_url is None and s.docker_url is None
    assert (s.database, s.exchange, s.queue_prefix) == ("paiq", "paiq.events", "paiq")
    assert (s.api_host, s.api_port, s.api_url) == ("127.0.0.1", 9186, "http://127.0.0.1:9186")
    assert s.data_dir == Path("/var/lib/paiq")
    assert s.default_fs_uri == "file:///var/lib/paiq/fs"
    assert (s.log_level, s.log_format, s.reconcile_seconds, s.stop_grace_seconds) == ("info", "console", 10, 10)
    node = s.node
    assert (node.node_id, node.ip, node.cpus, node.memory_mb) == ("n1", None, 8, 16384)  # resolved by the launcher
    assert (s.launcher.network, s.launcher.task_network, s.launcher.pids_limit) == ("bridge", "paiq-tasks", 4096)
    assert (s.launcher.disk_limit_mb, s.launcher.disk_check_seconds) == (51200, 30)
    assert node.gpus == ()
    assert node.port_range == (20000, 29999)
    assert s.body_timeout_seconds == 30


def test_machine_defaults_are_sane_without_any_setting() -> None:
    s = Settings.from_env({})
    assert s.node.node_id and s.node.cpus >= 1 and s.node.memory_mb > 0
    assert s.data_dir.is_absolute() and s.data_dir.name == ".paiq"


def test_empty_values_mean_the_default() -> None:
    s = from_env(PAIQ_API_PORT="", PAIQ_NODE_PORT_RANGE="", PAIQ_NODE_GPUS="", PAIQ_MONGODB_URI="",
                 PAIQ_AMQP_URL="", PAIQ_LOG_LEVEL="")
    assert (s.api_port, s.node.port_range, s.node.gpus) == (9186, (20000, 29999), ())
    assert s.mongodb_uri is None and s.amqp_url is None and s.log_level == "info"


def test_values_are_read() -> None:
    s = from_env(
        PAIQ_MONGODB_URI="mongodb://paiq:pw@db:27017", PAIQ_MONGODB_DATABASE="pq", PAIQ_AMQP_URL="amqp://paiq:pw@mq/",
        PAIQ_EXCHANGE="x", PAIQ_QUEUE_PREFIX="qp", PAIQ_API_HOST="0.0.0.0", PAIQ_API_PORT="8080",
        PAIQ_DEFAULT_FS_URI="hdfs://nn:9000", PAIQ_NODE_IP="10.0.0.5", PAIQ_NODE_GPUS="0:V100,1:K80",
        PAIQ_NODE_PORT_RANGE="30000-30100", PAIQ_LOG_LEVEL="DEBUG", PAIQ_LOG_FORMAT="json",
        PAIQ_RECONCILE_SECONDS="3", PAIQ_STOP_GRACE_SECONDS="1", PAIQ_DOCKER_URL="unix:///run/docker.sock",
        PAIQ_BODY_TIMEOUT_SECONDS="5",
    )
    assert (s.mongodb_uri, s.database, s.amqp_url, s.exchange, s.queue_prefix) == (
        "mongodb://paiq:pw@db:27017", "pq", "amqp://paiq:pw@mq/", "x", "qp")
    assert s.api_url == "http://0.0.0.0:8080"
    assert s.default_fs_uri == "hdfs://nn:9000"
    assert (s.node.ip, s.node.gpus, s.node.port_range) == ("10.0.0.5", ((0, "V100"), (1, "K80")), (30000, 30100))
    assert (s.log_level, s.log_format, s.reconcile_seconds, s.stop_grace_seconds) == ("debug", "json", 3, 1)
    assert s.docker_url == "unix:///run/docker.sock"
    assert s.body_timeout_seconds == 5


def test_docker_host_is_the_fallback_docker_url() -> None:
    assert from_env(DOCKER_HOST="tcp://h:2375").docker_url == "tcp://h:2375"
    assert from_env(DOCKER_HOST="tcp://h:2375", PAIQ_DOCKER_URL="unix:///x").docker_url == "unix:///x"


@pytest.mark.parametrize(("raw", "expected"), [("20000-20000", (20000, 20000)), (" 1 - 65535 ", (1, 65535)),
                                               ("30000-30099", (30000, 30099))])
def test_port_range(raw: str, expected: tuple[int, int]) -> None:
    assert from_env(PAIQ_NODE_PORT_RANGE=raw).node.port_range == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("", ()), ("  ", ()), ("4xV100", ((0, "V100"), (1, "V100"), (2, "V100"), (3, "V100"))),
     ("2xTITANX", ((0, "TITANX"), (1, "TITANX"))), ("0xK80", ()),
     ("0:V100,1:V100,2:K80", ((0, "V100"), (1, "V100"), (2, "K80"))), ("3:V100, 5:V100", ((3, "V100"), (5, "V100"))),
     ("0:Tesla-X", ((0, "Tesla-X"),))],
)
def test_parse_gpus(raw: str, expected: tuple[tuple[int, str], ...]) -> None:
    assert parse_gpus(raw) == expected


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("PAIQ_API_PORT", "http", ("integer", "'http'")),
        ("PAIQ_NODE_CPUS", "eight", ("integer",)),
        ("PAIQ_NODE_MEMORY_MB", "16G", ("integer",)),
        ("PAIQ_RECONCILE_SECONDS", "1.5", ("integer",)),
        ("PAIQ_NODE_PORT_RANGE", "30000", ("20000-29999",)),
        ("PAIQ_NODE_PORT_RANGE", "a-b", ("20000-29999",)),
        ("PAIQ_NODE_PORT_RANGE", "30000-", ("20000-29999",)),
        ("PAIQ_NODE_PORT_RANGE", "-1-5", ("20000-29999",)),
        ("PAIQ_NODE_PORT_RANGE", "30000-20000", ("ascending",)),
        ("PAIQ_NODE_PORT_RANGE", "0-100", ("1-65535",)),
        ("PAIQ_NODE_PORT_RANGE", "60000-65536", ("1-65535",)),
        ("PAIQ_NODE_PORT_RANGE", "²-5", ()),  # str.isdigit() is true for "²", int() refuses it
        ("PAIQ_NODE_GPUS", "V100", ("0:V100",)),
        ("PAIQ_NODE_GPUS", "0:V100,0:K80", ("repeat",)),
        ("PAIQ_NODE_GPUS", "0:V100,,1:V100", ()),
        ("PAIQ_NODE_GPUS", "0:", ()),
        ("PAIQ_NODE_GPUS", "a:V100", ()),
        ("PAIQ_NODE_GPUS", "-1:V100", ()),
        ("PAIQ_NODE_GPUS", "xV100", ("4xV100",)),
        ("PAIQ_NODE_GPUS", "4x", ("4xV100",)),
        ("PAIQ_NODE_GPUS", "fourxV100", ("4xV100",)),
        ("PAIQ_NODE_GPUS", "²xV100", ()),  # same: a digit to isdigit(), not to int()
        ("PAIQ_NODE_GPUS", "0:V100,¹:V100", ()),
    ],
)
def test_bad_values_raise_settings_error_naming_the_variable(name: str, value: str, words: tuple[str, ...]) -> None:
    with pytest.raises(SettingsError) as info:
        from_env(**{name: value})
    assert info.value.name == name
    assert name in str(info.value)
    assert repr(value) in info.value.rule, "the rule quotes the value it refused"
    for word in words:
        assert word in info.value.rule


@pytest.mark.parametrize(("raw", "days"), [("", 0.0), ("0", 0.0), ("30", 30.0), ("0.5", 0.5)])
def test_job_retention_is_off_by_default_and_read_in_days(raw: str, days: float) -> None:
    assert Settings.from_env({"PAIQ_JOB_RETENTION_DAYS": raw}).job_retention_days == days


@pytest.mark.parametrize("raw", ["-1", "a week", "nan", "inf", "1e9"])
def test_a_bad_job_retention_is_refused_naming_the_setting(raw: str) -> None:
    with pytest.raises(SettingsError, match="PAIQ_JOB_RETENTION_DAYS"):
        Settings.from_env({"PAIQ_JOB_RETENTION_DAYS": raw})


def test_the_embedded_database_cache_is_a_size() -> None:
    assert Settings.from_env({}).embedded_db_cache == "AUTO"
    assert Settings.from_env({"PAIQ_EMBEDDED_DB_CACHE": " auto"}).embedded_db_cache == "AUTO"
    assert Settings.from_env({"PAIQ_EMBEDDED_DB_CACHE": "512m"}).embedded_db_cache == "512M"
    for bad in ("0G", "lots", "1T", "-1G"):
        with pytest.raises(SettingsError, match="PAIQ_EMBEDDED_DB_CACHE"):
            Settings.from_env({"PAIQ_EMBEDDED_DB_CACHE": bad})


@pytest.mark.parametrize("raw", ["0", "-3", "soon"])
def test_the_body_timeout_is_a_whole_number_of_seconds_from_one(raw: str) -> None:
    with pytest.raises(SettingsError) as info:
        from_env(PAIQ_BODY_TIMEOUT_SECONDS=raw)
    assert info.value.name == "PAIQ_BODY_TIMEOUT_SECONDS" and raw in info.value.rule


# --- every variable: bounds, syntax, empty = default, one-line errors (pydantic-settings) --------------------

CONFIGURATION_PAGE = Path(__file__).resolve().parents[2] / "docs" / "operators" / "configuration.md"
ALL_VARIABLES = every_variable(Settings)
CLI_VARIABLES = every_variable(CliSettings)


def read(path: str, settings: Settings) -> object:
    return attrgetter(path)(settings)


def refusal(**env: str) -> SettingsError:
    with pytest.raises(SettingsError) as info:
        from_env(**env)
    return info.value


@pytest.mark.parametrize("var", ALL_VARIABLES)
def test_an_empty_value_is_the_default(var: str) -> None:
    assert Settings.from_env({var: ""}) == Settings.from_env({})


@pytest.mark.parametrize("var", ALL_VARIABLES + CLI_VARIABLES)
def test_every_variable_is_in_the_configuration_table(var: str) -> None:
    table = CONFIGURATION_PAGE.read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    assert f"`{var}`" in table or var == "DOCKER_HOST"


def test_each_variable_is_read_once_under_one_name() -> None:
    assert len(ALL_VARIABLES) == len(set(ALL_VARIABLES))
    assert all(var.startswith("PAIQ_") for var in ALL_VARIABLES if var != "DOCKER_HOST")


# (variable, where it lands, least, most); None: no bound that side.
BOUNDED: list[tuple[str, str, int, int | None]] = [
    ("PAIQ_RECONCILE_SECONDS", "reconcile_seconds", 1, None),
    ("PAIQ_LEASE_SECONDS", "lease_seconds", 3, None),
    ("PAIQ_NODE_TIMEOUT_SECONDS", "node_timeout_seconds", 4, None),
    ("PAIQ_STOP_GRACE_SECONDS", "stop_grace_seconds", 0, None),
    ("PAIQ_BACKFILL_BOUND_SECONDS", "backfill_bound_seconds", 0, None),
    ("PAIQ_BODY_TIMEOUT_SECONDS", "body_timeout_seconds", 1, None),
    ("PAIQ_CODE_DIR_MAX_MB", "launcher.code_dir_max_mb", 1, None),
    ("PAIQ_TASK_LOG_MAX_BYTES", "launcher.task_log_max_bytes", 1, None),
    ("PAIQ_DEBUG_KEEP_SECONDS", "launcher.debug_keep_seconds", 1, None),
    ("PAIQ_MAX_JOB_TASKS", "job_limits.max_job_tasks", 1, 5000),
    ("PAIQ_MAX_TASK_ROLES", "job_limits.max_task_roles", 1, 100),
    ("PAIQ_MAX_JSON_VALUES", "job_limits.max_json_values", 1000, 1_000_000),
    ("PAIQ_MAX_JSON_DEPTH", "job_limits.max_json_depth", 5, 90),
    ("PAIQ_MAX_KEY_BYTES", "job_limits.max_key_bytes", 32, 65536),
    ("PAIQ_MAX_STRING_BYTES", "job_limits.max_string_bytes", 1024, 1024 * 1024),
    ("PAIQ_MAX_JOB_DOCUMENT_BYTES", "job_limits.max_document_bytes", 1024 * 1024, 15 * 1024 * 1024),
]


@pytest.mark.parametrize(("var", "path", "least", "most"), BOUNDED)
def test_a_bounded_integer_is_read_at_its_bounds(var: str, path: str, least: int, most: int | None) -> None:
    assert read(path, from_env(**{var: str(least)})) == least
    if most is not None:
        assert read(path, from_env(**{var: str(most)})) == most
    else:
        assert read(path, from_env(**{var: str(least + 10**9)})) == least + 10**9


@pytest.mark.parametrize(("var", "path", "least", "most"), BOUNDED)
def test_a_bounded_integer_past_its_bounds_is_refused_naming_them(var: str, path: str, least: int,
                                                                  most: int | None) -> None:
    below = refusal(**{var: str(least - 1)})
    assert below.name == var
    if most is None:
        assert below.rule == f"must be >= {least:,}, got {least - 1:,}"
    else:
        assert below.rule == f"must be {least:,}-{most:,}, got {least - 1:,}"
        assert refusal(**{var: str(most + 1)}).rule == f"must be {least:,}-{most:,}, got {most + 1:,}"


def test_the_job_limits_settings_are_those_of_shared_joblimits() -> None:
    for name, (var, least, most) in LIMIT_SETTINGS.items():
        info = JobLimitSettings.model_fields[name]
        assert (variables(info, name), bounds(info), info.default) == ([var], (least, most), getattr(JobLimits(), name))
    assert {var for var, *_ in LIMIT_SETTINGS.values()} == {var for var, path, *_ in BOUNDED if "job_limits" in path}


UNBOUNDED = [("PAIQ_API_PORT", "api_port"), ("PAIQ_NODE_CPUS", "node.cpus"), ("PAIQ_NODE_MEMORY_MB", "node.memory_mb"),
             ("PAIQ_MAX_PLATFORM_RETRIES", "max_platform_retries"), ("PAIQ_RETRY_BACKOFF_MS", "retry_backoff_ms")]
INTEGER_VARIABLES = [var for var, *_ in BOUNDED] + [var for var, _ in UNBOUNDED] + [
    "PAIQ_OPS_PORT", "PAIQ_SCHEDULER_OPS_PORT", "PAIQ_STATUS_OPS_PORT", "PAIQ_LAUNCHER_OPS_PORT"]


@pytest.mark.parametrize(("var", "path"), UNBOUNDED)
@pytest.mark.parametrize(("raw", "value"), [("7", 7), (" 42 ", 42), ("+5", 5), ("1_000", 1000), ("007", 7)])
def test_integers_take_pythons_int_syntax(var: str, path: str, raw: str, value: int) -> None:
    assert read(path, from_env(**{var: raw})) == value


@pytest.mark.parametrize("var", INTEGER_VARIABLES)
@pytest.mark.parametrize("raw", ["ten", "1.0", "1e3", "0x10", "  ", "5 5", "½"])
def test_an_integer_variable_refuses_what_is_not_an_integer(var: str, raw: str) -> None:
    error = refusal(**{var: raw})
    assert (error.name, error.rule) == (var, f"must be an integer, got {raw!r}")


@pytest.mark.parametrize(
    ("env", "ports"),
    [
        ({}, {"scheduler": 9187, "status": 9188, "launcher": 9189, "notify": 9190}),
        ({"PAIQ_OPS_PORT": "9000"}, {"scheduler": 9000, "status": 9000, "launcher": 9000, "notify": 9000}),
        ({"PAIQ_OPS_PORT": "9000", "PAIQ_STATUS_OPS_PORT": "9001"}, {"scheduler": 9000, "status": 9001,
                                                                     "launcher": 9000, "notify": 9000}),
        ({"PAIQ_SCHEDULER_OPS_PORT": "1", "PAIQ_LAUNCHER_OPS_PORT": "65535"}, {"scheduler": 1, "status": 9188,
                                                                               "launcher": 65535, "notify": 9190}),
        ({"PAIQ_OPS_PORT": "9000", "PAIQ_SCHEDULER_OPS_PORT": "0"}, {"scheduler": 9000, "status": 9000,
                                                                     "launcher": 9000, "notify": 9000}),
        ({"PAIQ_OPS_PORT": "0"}, {"scheduler": 9187, "status": 9188, "launcher": 9189, "notify": 9190}),
    ],
)
def test_an_ops_port_falls_back_to_the_common_one_then_the_default(env: dict[str, str], ports: dict[str, int]) -> None:
    assert from_env(**env).ops_ports == ports


@pytest.mark.parametrize("var", ["PAIQ_OPS_PORT", "PAIQ_SCHEDULER_OPS_PORT", "PAIQ_STATUS_OPS_PORT",
                                 "PAIQ_LAUNCHER_OPS_PORT"])
@pytest.mark.parametrize("raw", ["-1", "65536", "100000"])
def test_an_ops_port_outside_the_port_numbers_is_refused_naming_its_own_variable(var: str, raw: str) -> None:
    error = refusal(**{var: raw})
    assert (error.name, error.rule) == (var, f"must be a port number 1-65535 (0: not set), got {raw}")


@pytest.mark.parametrize(("raw", "pull"), [("1", True), ("0", False), ("true", True), ("false", False),
                                           ("TRUE", True), (" False ", False), ("", True)])
def test_pull_latest_is_a_switch(raw: str, pull: bool) -> None:
    assert from_env(PAIQ_PULL_LATEST=raw).launcher.pull_latest is pull


@pytest.mark.parametrize("raw", ["yes", "no", "on", "2", "  ", "t"])
def test_pull_latest_refuses_other_words(raw: str) -> None:
    error = refusal(PAIQ_PULL_LATEST=raw)
    assert (error.name, error.rule) == ("PAIQ_PULL_LATEST", f"must be 1, 0, true or false, got {raw!r}")


@pytest.mark.parametrize(("raw", "network"), [("host", "host"), ("bridge", "bridge"), ("", "bridge")])
def test_the_node_network_is_host_or_bridge(raw: str, network: str) -> None:
    assert from_env(PAIQ_NODE_NETWORK=raw).launcher.network == network


@pytest.mark.parametrize("raw", ["Host", "nat", " bridge", "none"])
def test_another_node_network_is_refused(raw: str) -> None:
    assert refusal(PAIQ_NODE_NETWORK=raw).rule == f"must be host or bridge, got {raw!r}"


@pytest.mark.parametrize(("raw", "rule"), [
    ("bridge", "must be a network of paiq's own, not Docker's 'bridge'"),
    ("host", "must be a network of paiq's own, not Docker's 'host'"),
    ("a b", "must be a Docker network name (letters, digits, _ . -, at most 63), got 'a b'"),
    ("-x", "must be a Docker network name (letters, digits, _ . -, at most 63), got '-x'"),
])
def test_the_task_network_is_one_of_paiqs_own(raw: str, rule: str) -> None:
    assert refusal(PAIQ_TASK_NETWORK=raw).rule == rule


@pytest.mark.parametrize(("var", "raw", "said"), [
    ("PAIQ_MONGODB_URI", "mongodb://db:27017/?replicaSet=rs0", "must log in"),
    ("PAIQ_MONGODB_URI", "mongodb://@db:27017", "must log in"),
    ("PAIQ_MONGODB_URI", "mongodb+srv://cluster.example.net/", "must log in"),
    ("PAIQ_MONGODB_URI", "postgres://u:secretpw@db/", "must be a mongodb:// or mongodb+srv:// connection string, got "
                                                      "'postgres://...'"),
    ("PAIQ_AMQP_URL", "amqp://mq:5672/", "must log in as a user of paiq's own, not RabbitMQ's guest account (none "
                                         "given)"),
    ("PAIQ_AMQP_URL", "amqp://guest:guest@mq:5672/", "(guest given)"),
    ("PAIQ_AMQP_URL", "amqp://guest@mq:5672/", "(guest given)"),
    ("PAIQ_AMQP_URL", "http://u:secretpw@mq/", "must be an amqp:// or amqps:// URL, got 'http://...'"),
])
def test_the_database_and_the_broker_are_never_used_without_a_login(var: str, raw: str, said: str) -> None:
    error = refusal(**{var: raw})
    assert error.name == var and said in error.rule and "secretpw" not in str(error), str(error)


@pytest.mark.parametrize(("var", "raw"), [
    ("PAIQ_MONGODB_URI", "mongodb://paiq:pw@db:27017/?authSource=admin"),
    ("PAIQ_MONGODB_URI", "mongodb://paiq@db1,db2/?authMechanism=MONGODB-AWS"),
    ("PAIQ_MONGODB_URI", "mongodb://db:27017/?tls=true&authMechanism=MONGODB-X509"),
    ("PAIQ_MONGODB_URI", "mongodb+srv://paiq:pw@cluster.example.net/"),
    ("PAIQ_AMQP_URL", "amqps://paiq:pw@mq:5671/vhost"),
])
def test_a_login_is_enough(var: str, raw: str) -> None:
    assert getattr(from_env(**{var: raw}), var.removeprefix("PAIQ_").lower()) == raw


@pytest.mark.parametrize(("raw", "written"), [("1", True), ("", False), ("0", False), ("true", False)])
def test_only_1_writes_credentials(raw: str, written: bool) -> None:
    assert from_env(PAIQ_WRITE_CREDENTIALS=raw).write_credentials is written


@pytest.mark.parametrize(("raw", "size"), [("1M", "1M"), ("999999g", "999999G"), (" 2g ", "2G")])
def test_the_embedded_database_cache_sizes_at_the_bounds(raw: str, size: str) -> None:
    assert from_env(PAIQ_EMBEDDED_DB_CACHE=raw).embedded_db_cache == size


@pytest.mark.parametrize("raw", ["0M", "1000000M", "1.5G", "1", "G", "01G"])
def test_the_embedded_database_cache_past_the_bounds_is_refused(raw: str) -> None:
    assert refusal(PAIQ_EMBEDDED_DB_CACHE=raw).rule == f"must be auto or a size like 512M or 2G, got {raw!r}"


@pytest.mark.parametrize(("raw", "days"), [("99999.5", 99999.5), (" 7 ", 7.0), ("1e-3", 0.001)])
def test_job_retention_at_its_bounds(raw: str, days: float) -> None:
    assert from_env(PAIQ_JOB_RETENTION_DAYS=raw).job_retention_days == days


@pytest.mark.parametrize("raw", ["100000", "-0.5", "nan", "-inf"])
def test_job_retention_past_its_bounds_is_refused_with_the_range(raw: str) -> None:
    assert "below 100,000" in refusal(PAIQ_JOB_RETENTION_DAYS=raw).rule


@pytest.mark.parametrize("node_id", ["a", "A" * 64, "node-1_b"])
def test_node_ids_at_the_bounds(node_id: str) -> None:
    assert from_env(PAIQ_NODE_ID=node_id).node.node_id == node_id


@pytest.mark.parametrize("node_id", ["A" * 65, "a.b", "a b", "nœud", " a"])
def test_node_ids_past_the_bounds_are_refused(node_id: str) -> None:
    error = refusal(PAIQ_NODE_ID=node_id)
    assert (error.name, error.rule) == ("PAIQ_NODE_ID", f"must be 1-64 letters, digits, '-' or '_', got {node_id!r}")


@pytest.mark.parametrize(("host", "node_id"), [("gpu01.example.org", "gpu01-example-org"), ("box", "box")])
def test_the_default_node_id_is_the_host_name_made_a_word(host: str, node_id: str) -> None:
    assert node_id_of_host(host) == node_id


@pytest.mark.parametrize(("raw", "message"), [("0-65535", "1-65535"), ("1-65536", "1-65535"), ("2-1", "ascending")])
def test_port_range_past_the_bounds(raw: str, message: str) -> None:
    assert message in refusal(PAIQ_NODE_PORT_RANGE=raw).rule


def test_texts_are_taken_as_they_are_and_the_log_level_lowered() -> None:
    s = from_env(PAIQ_LOG_LEVEL="WARNING", PAIQ_ADMIN_USER="root", PAIQ_ADMIN_PASSWORD="pw",
                 PAIQ_VIRTUAL_CLUSTERS="vc.yaml", PAIQ_EXIT_SPEC="exit.yaml", PAIQ_OPS_HOST="0.0.0.0",
                 PAIQ_MAX_PLATFORM_RETRIES="0", PAIQ_RETRY_BACKOFF_MS="-1")
    assert (s.log_level, s.admin_user, s.admin_password, s.virtual_clusters_path, s.exit_spec_path, s.ops_host) == (
        "warning", "root", "pw", "vc.yaml", "exit.yaml", "0.0.0.0")
    assert (s.max_platform_retries, s.retry_backoff_ms) == (0, -1)
    assert "pw" not in repr(s)


def test_the_data_dir_is_expanded_and_places_the_default_file_system() -> None:
    s = from_env(PAIQ_DATA_DIR="~/paiq-data")
    assert s.data_dir == Path.home() / "paiq-data"
    assert s.default_fs_uri == f"file://{Path.home() / 'paiq-data' / 'fs'}"


def test_an_empty_docker_url_falls_back_to_docker_host() -> None:
    assert from_env(PAIQ_DOCKER_URL="", DOCKER_HOST="tcp://h:2375").docker_url == "tcp://h:2375"
    assert from_env(PAIQ_DOCKER_URL="", DOCKER_HOST="").docker_url is None


def test_names_are_case_sensitive() -> None:
    assert from_env(paiq_api_port="1").api_port == 9186


def test_only_the_given_mapping_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PAIQ_API_PORT", "1111")
    monkeypatch.setenv("PAIQ_EXCHANGE", "from-os-environ")
    for var, value in (("PAIQ_NODE_IP", "10.9.9.9"), ("PAIQ_NODE_NETWORK", "host"), ("PAIQ_MAX_JOB_TASKS", "3"),
                       ("PAIQ_API", "http://elsewhere"), ("PAIQ_TOKEN", "t")):
        monkeypatch.setenv(var, value)
    (tmp_path / ".env").write_text("PAIQ_QUEUE_PREFIX=from-dotenv\nPAIQ_LEASE_SECONDS=1\nPAIQ_NODE_CPUS=1\n")
    monkeypatch.chdir(tmp_path)
    s = from_env()
    assert (s.api_port, s.exchange, s.queue_prefix, s.lease_seconds) == (9186, "paiq.events", "paiq", 15)
    assert (s.node.ip, s.node.cpus, s.launcher.network, s.job_limits.max_job_tasks) == (None, 8, "bridge", 5000)
    assert (CliSettings.from_env({}).api, CliSettings.from_env({}).token) == (None, None)


def test_a_part_is_read_from_its_variables_only() -> None:
    # The parts' field names and the parts' own names are no variables (only PAIQ_NODE_IP sets node.ip).
    s = from_env(ip="10.0.0.1", network="host", max_job_tasks="3", node="{}", launcher="x", job_limits="[]")
    assert (s.node.ip, s.launcher.network, s.job_limits.max_job_tasks) == (None, "bridge", 5000)


def test_a_wrong_host_name_as_the_default_node_id_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "uname", lambda: SimpleNamespace(nodename="h" * 70))
    error = refusal(PAIQ_NODE_ID="")
    assert error.name == "PAIQ_NODE_ID" and error.rule.startswith("must be 1-64 letters")


def test_the_same_mapping_gives_the_same_settings() -> None:
    env = {**BASE, "PAIQ_NODE_GPUS": "2xK80", "PAIQ_OPS_PORT": "9000"}
    assert Settings.from_env(env) == Settings.from_env(dict(reversed(env.items())))


# One wrong value of each kind: the error is one line, "setting <VAR> <rule>", quoting the value, with none
# of pydantic's wording or links.
ONE_LINE = [
    ("PAIQ_API_PORT", "http"), ("PAIQ_LEASE_SECONDS", "2"), ("PAIQ_MAX_JOB_TASKS", "5001"),
    ("PAIQ_NODE_GPUS", "0:V100,\nK80"), ("PAIQ_NODE_PORT_RANGE", "1-2-3"), ("PAIQ_PULL_LATEST", "yes"),
    ("PAIQ_NODE_NETWORK", "nat"), ("PAIQ_EMBEDDED_DB_CACHE", "lots"), ("PAIQ_JOB_RETENTION_DAYS", "forever"),
    ("PAIQ_NODE_ID", "a\nb"), ("PAIQ_OPS_PORT", "99999"), ("PAIQ_NODE_CPUS", "x" * 10_000),
    ("PAIQ_GPU_DEVICES", "amd"),
]


@pytest.mark.parametrize(("var", "raw"), ONE_LINE)
def test_a_refusal_is_one_line_naming_the_variable(var: str, raw: str) -> None:
    error = refusal(**{var: raw})
    text = str(error)
    assert error.name == var and text == f"setting {var} {error.rule}"
    assert "\n" not in text and len(text) < 200
    for word in ("pydantic", "http://", "https://", "Input should", "For further information", "type=", "Value error"):
        assert word not in text, text
    assert error.__cause__ is None and error.__suppress_context__


def test_two_refusals_word_for_word() -> None:
    assert str(refusal(PAIQ_LEASE_SECONDS="2")) == "setting PAIQ_LEASE_SECONDS must be >= 3, got 2"
    assert str(refusal(PAIQ_MAX_JOB_TASKS="0")) == "setting PAIQ_MAX_JOB_TASKS must be 1-5,000, got 0"
    assert str(refusal(PAIQ_NODE_CPUS="x" * 100)) == f"setting PAIQ_NODE_CPUS must be an integer, got {'x' * 80!r}..."


def test_of_several_wrong_variables_the_first_in_the_table_is_named() -> None:
    env = {"PAIQ_MAX_JOB_TASKS": "0", "PAIQ_LEASE_SECONDS": "1", "PAIQ_API_PORT": "http"}
    assert refusal(**env).name == "PAIQ_API_PORT"
    assert refusal(**dict(reversed(env.items()))).name == "PAIQ_API_PORT"


def test_a_wrong_default_names_its_variable() -> None:
    # The host name is PAIQ_NODE_ID's default: when it cannot be one, the error says which variable to set.
    error = settings_error(Settings, {"type": "value_error", "loc": ("node", "node_id"), "msg": "Value error, x",
                                     "input": "h" * 70, "ctx": {"error": ValueError("must be short")}})
    assert (error.name, error.rule) == ("PAIQ_NODE_ID", "must be short")


# --- the CLI's variables ---------------------------------------------------------------------------------


def test_the_cli_settings_default_to_none_and_the_data_dir_to_dot_paiq() -> None:
    cli = CliSettings.from_env({})
    assert (cli.api, cli.user, cli.token) == (None, None, None)
    assert cli.data_dir == Path.home() / ".paiq" == Settings.from_env({}).data_dir
    assert cli.credentials_path == Path.home() / ".paiq" / "credentials.json"


def test_the_cli_settings_are_read_and_an_empty_one_is_unset() -> None:
    cli = CliSettings.from_env({"PAIQ_API": "http://h:1", "PAIQ_USER": "alice", "PAIQ_TOKEN": "secret",
                                "PAIQ_DATA_DIR": "~/d", "PAIQ_API_PORT": "http"})
    assert (cli.api, cli.user, cli.token, cli.data_dir) == ("http://h:1", "alice", "secret", Path.home() / "d")
    assert "secret" not in repr(cli)
    assert CliSettings.from_env({"PAIQ_API": "", "PAIQ_USER": "", "PAIQ_TOKEN": ""}) == CliSettings.from_env({})
