"""Settings read once from an injected mapping: defaults, parsing, and errors that name the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.errors import SettingsError
from shared.settings import Settings, parse_gpus

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
    assert (node.node_id, node.ip, node.cpus, node.memory_mb) == ("n1", "127.0.0.1", 8, 16384)
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
        PAIQ_MONGODB_URI="mongodb://db:27017", PAIQ_MONGODB_DATABASE="pq", PAIQ_AMQP_URL="amqp://mq/",
        PAIQ_EXCHANGE="x", PAIQ_QUEUE_PREFIX="qp", PAIQ_API_HOST="0.0.0.0", PAIQ_API_PORT="8080",
        PAIQ_DEFAULT_FS_URI="hdfs://nn:9000", PAIQ_NODE_IP="10.0.0.5", PAIQ_NODE_GPUS="0:V100,1:K80",
        PAIQ_NODE_PORT_RANGE="30000-30100", PAIQ_LOG_LEVEL="DEBUG", PAIQ_LOG_FORMAT="json",
        PAIQ_RECONCILE_SECONDS="3", PAIQ_STOP_GRACE_SECONDS="1", PAIQ_DOCKER_URL="unix:///run/docker.sock",
        PAIQ_BODY_TIMEOUT_SECONDS="5",
    )
    assert (s.mongodb_uri, s.database, s.amqp_url, s.exchange, s.queue_prefix) == (
        "mongodb://db:27017", "pq", "amqp://mq/", "x", "qp")
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
    assert Settings.from_env({}).embedded_db_cache == "1G"
    assert Settings.from_env({"PAIQ_EMBEDDED_DB_CACHE": "512m"}).embedded_db_cache == "512M"
    for bad in ("0G", "lots", "1T", "-1G"):
        with pytest.raises(SettingsError, match="PAIQ_EMBEDDED_DB_CACHE"):
            Settings.from_env({"PAIQ_EMBEDDED_DB_CACHE": bad})


@pytest.mark.parametrize("raw", ["0", "-3", "soon"])
def test_the_body_timeout_is_a_whole_number_of_seconds_from_one(raw: str) -> None:
    with pytest.raises(SettingsError) as info:
        from_env(PAIQ_BODY_TIMEOUT_SECONDS=raw)
    assert info.value.name == "PAIQ_BODY_TIMEOUT_SECONDS" and raw in info.value.rule
