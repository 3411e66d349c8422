"""Settings, read once from an injectable mapping (normally ``os.environ``) and passed down."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from shared.errors import SettingsError
from shared.joblimits import LIMIT_SETTINGS, JobLimits


def _digits(text: str) -> bool:
    """ASCII digits only (str.isdigit also accepts '²')."""
    return text.isascii() and text.isdigit()


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as e:
        raise SettingsError(name, f"must be an integer, got {raw!r}") from e


def _port_range(env: Mapping[str, str], name: str, default: tuple[int, int]) -> tuple[int, int]:
    raw = env.get(name)
    if not raw:
        return default
    lo, sep, hi = raw.partition("-")
    if not sep or not _digits(lo.strip()) or not _digits(hi.strip()):
        raise SettingsError(name, f"must look like 20000-29999, got {raw!r}")
    first, last = int(lo), int(hi)
    if not 0 < first <= last < 65536:
        raise SettingsError(name, f"must be an ascending range inside 1-65535, got {raw!r}")
    return first, last


def parse_gpus(raw: str) -> tuple[tuple[int, str], ...]:
    """``"0:V100,1:V100,2:K80"`` or ``"4xV100"`` -> ((index, type), ...)."""
    raw = raw.strip()
    if not raw:
        return ()
    if "x" in raw and ":" not in raw:
        count, _, kind = raw.partition("x")
        if not _digits(count) or not kind:
            raise SettingsError("PAIQ_NODE_GPUS", f"expected like 4xV100, got {raw!r}")
        return tuple((i, kind) for i in range(int(count)))
    gpus: list[tuple[int, str]] = []
    for item in raw.split(","):
        idx, sep, kind = item.strip().partition(":")
        if not sep or not _digits(idx) or not kind:
            raise SettingsError("PAIQ_NODE_GPUS", f"expected like 0:V100,1:V100, got {raw!r}")
        gpus.append((int(idx), kind))
    if len({i for i, _ in gpus}) != len(gpus):
        raise SettingsError("PAIQ_NODE_GPUS", f"GPU indices repeat in {raw!r}")
    return tuple(gpus)


def _total_memory_mb() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024))
    except (ValueError, OSError):
        return 8192


@dataclass(frozen=True)
class NodeSettings:
    """What a launcher agent declares about its node."""

    node_id: str
    ip: str
    cpus: int
    memory_mb: int
    gpus: tuple[tuple[int, str], ...]
    port_range: tuple[int, int]


@dataclass(frozen=True)
class LauncherSettings:
    """How a launcher agent runs tasks on its node."""

    pull_latest: bool = True  # re-pull images tagged `latest` (or untagged) at each launch
    code_dir_max_mb: int = 200
    task_log_max_bytes: int = 4 * 1024 * 1024
    debug_keep_seconds: int = 7 * 24 * 3600
    network: str = "host"  # or "bridge": each task port published 1:1 on the host


def _launcher_settings(env: Mapping[str, str]) -> LauncherSettings:
    pull_latest = (env.get("PAIQ_PULL_LATEST") or "1").strip().lower()
    if pull_latest not in {"1", "0", "true", "false"}:
        raise SettingsError("PAIQ_PULL_LATEST", f"must be 1 or 0, got {pull_latest!r}")
    network = env.get("PAIQ_NODE_NETWORK") or "host"
    if network not in {"host", "bridge"}:
        raise SettingsError("PAIQ_NODE_NETWORK", f"must be host or bridge, got {network!r}")
    sizes = {var: _int(env, var, default) for var, default in (
        ("PAIQ_CODE_DIR_MAX_MB", 200), ("PAIQ_TASK_LOG_MAX_BYTES", 4 * 1024 * 1024),
        ("PAIQ_DEBUG_KEEP_SECONDS", 7 * 24 * 3600))}
    for var, value in sizes.items():
        if value < 1:
            raise SettingsError(var, f"must be >= 1, got {value}")
    return LauncherSettings(
        pull_latest=pull_latest in {"1", "true"}, network=network,
        code_dir_max_mb=sizes["PAIQ_CODE_DIR_MAX_MB"], task_log_max_bytes=sizes["PAIQ_TASK_LOG_MAX_BYTES"],
        debug_keep_seconds=sizes["PAIQ_DEBUG_KEEP_SECONDS"])


RETENTION = "PAIQ_JOB_RETENTION_DAYS"


def _cache_size(env: Mapping[str, str]) -> str:
    raw = (env.get("PAIQ_EMBEDDED_DB_CACHE") or "1G").strip().upper()
    if not re.fullmatch(r"[1-9][0-9]{0,5}[MG]", raw):
        raise SettingsError("PAIQ_EMBEDDED_DB_CACHE", f"must be a size like 512M or 2G, got {raw!r}")
    return raw


def _retention_days(env: Mapping[str, str]) -> float:
    raw = (env.get(RETENTION) or "0").strip()
    try:
        days = float(raw)
    except ValueError:
        raise SettingsError(RETENTION, f"must be a number of days (0: keep forever), got {raw!r}") from None
    if not (0 <= days < 100_000):
        raise SettingsError(RETENTION, f"must be 0 (keep forever) or a positive number of days, got {raw}")
    return days


def _job_limits(env: Mapping[str, str]) -> JobLimits:
    """PAIQ_MAX_JOB_TASKS and the other limits of one job submission (shared.joblimits), each within its
    bounds."""
    defaults = JobLimits()
    values = {}
    for name, (var, least, most) in LIMIT_SETTINGS.items():
        value = _int(env, var, getattr(defaults, name))
        if not least <= value <= most:
            raise SettingsError(var, f"must be {least:,}-{most:,}, got {value:,}")
        values[name] = value
    return JobLimits(**values)


# Where the scheduler's, status's and launcher's /healthz and /metrics listen by default.
DEFAULT_OPS_PORTS = {"scheduler": 9187, "status": 9188, "launcher": 9189}


def _ops_ports(env: Mapping[str, str]) -> dict[str, int]:
    """PAIQ_<SERVICE>_OPS_PORT, else PAIQ_OPS_PORT, else the default, per service."""
    common = _int(env, "PAIQ_OPS_PORT", 0)
    ports = {}
    for service, default in DEFAULT_OPS_PORTS.items():
        var = f"PAIQ_{service.upper()}_OPS_PORT"
        port = _int(env, var, 0) or common or default
        if not 0 < port < 65536:
            raise SettingsError(var, f"must be a port number 1-65535, got {port}")
        ports[service] = port
    return ports


@dataclass(frozen=True)
class Settings:
    mongodb_uri: str | None
    database: str
    amqp_url: str | None
    exchange: str
    queue_prefix: str
    api_host: str
    api_port: int
    data_dir: Path
    default_fs_uri: str
    docker_url: str | None
    node: NodeSettings
    ops_host: str = "127.0.0.1"
    ops_ports: Mapping[str, int] = field(default_factory=dict)
    lease_seconds: int = 15
    node_timeout_seconds: int = 40
    backfill_bound_seconds: int = 600
    virtual_clusters_path: str | None = None
    exit_spec_path: str | None = None
    max_platform_retries: int = 10
    retry_backoff_ms: int = 2000
    admin_user: str | None = None
    admin_password: str | None = field(default=None, repr=False)
    write_credentials: bool = False
    log_level: str = "info"
    log_format: str = "console"
    reconcile_seconds: int = 10
    stop_grace_seconds: int = 10
    body_timeout_seconds: int = 30
    job_retention_days: float = 0  # 0: keep ended jobs forever
    embedded_db_cache: str = "1G"  # paiq up's SecantusDB: its WiredTiger cache must hold what is stored
    launcher: LauncherSettings = field(default_factory=LauncherSettings)
    job_limits: JobLimits = field(default_factory=JobLimits)

    @property
    def api_url(self) -> str:
        return f"http://{self.api_host}:{self.api_port}"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        data_dir = Path(env.get("PAIQ_DATA_DIR") or Path.home() / ".paiq").expanduser()
        node_id = env.get("PAIQ_NODE_ID") or re.sub(r"[^A-Za-z0-9_-]", "-", os.uname().nodename)
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", node_id):
            # It is a word of routing keys (node.<id>.launch) and a container label.
            raise SettingsError("PAIQ_NODE_ID", f"must be 1-64 letters, digits, '-' or '_', got {node_id!r}")
        node = NodeSettings(
            node_id=node_id,
            ip=env.get("PAIQ_NODE_IP") or "127.0.0.1",
            cpus=_int(env, "PAIQ_NODE_CPUS", os.cpu_count() or 1),
            memory_mb=_int(env, "PAIQ_NODE_MEMORY_MB", _total_memory_mb()),
            gpus=parse_gpus(env.get("PAIQ_NODE_GPUS", "")),
            port_range=_port_range(env, "PAIQ_NODE_PORT_RANGE", (20000, 29999)),
        )
        timing = {var: _int(env, var, default) for var, default in (
            ("PAIQ_RECONCILE_SECONDS", 10), ("PAIQ_LEASE_SECONDS", 15), ("PAIQ_NODE_TIMEOUT_SECONDS", 40),
            ("PAIQ_STOP_GRACE_SECONDS", 10), ("PAIQ_BACKFILL_BOUND_SECONDS", 600),
            ("PAIQ_BODY_TIMEOUT_SECONDS", 30))}
        for var, least in (("PAIQ_RECONCILE_SECONDS", 1), ("PAIQ_LEASE_SECONDS", 3), ("PAIQ_NODE_TIMEOUT_SECONDS", 4),
                           ("PAIQ_STOP_GRACE_SECONDS", 0), ("PAIQ_BACKFILL_BOUND_SECONDS", 0),
                           ("PAIQ_BODY_TIMEOUT_SECONDS", 1)):
            if timing[var] < least:
                raise SettingsError(var, f"must be >= {least}, got {timing[var]}")
        return cls(
            mongodb_uri=env.get("PAIQ_MONGODB_URI") or None,
            database=env.get("PAIQ_MONGODB_DATABASE") or "paiq",
            amqp_url=env.get("PAIQ_AMQP_URL") or None,
            exchange=env.get("PAIQ_EXCHANGE") or "paiq.events",
            queue_prefix=env.get("PAIQ_QUEUE_PREFIX") or "paiq",
            api_host=env.get("PAIQ_API_HOST") or "127.0.0.1",
            api_port=_int(env, "PAIQ_API_PORT", 9186),
            data_dir=data_dir,
            default_fs_uri=env.get("PAIQ_DEFAULT_FS_URI") or f"file://{data_dir / 'fs'}",
            docker_url=env.get("PAIQ_DOCKER_URL") or env.get("DOCKER_HOST") or None,
            node=node,
            ops_host=env.get("PAIQ_OPS_HOST") or "127.0.0.1",
            ops_ports=_ops_ports(env),
            lease_seconds=timing["PAIQ_LEASE_SECONDS"],
            node_timeout_seconds=timing["PAIQ_NODE_TIMEOUT_SECONDS"],
            backfill_bound_seconds=timing["PAIQ_BACKFILL_BOUND_SECONDS"],
            virtual_clusters_path=env.get("PAIQ_VIRTUAL_CLUSTERS") or None,
            exit_spec_path=env.get("PAIQ_EXIT_SPEC") or None,
            max_platform_retries=_int(env, "PAIQ_MAX_PLATFORM_RETRIES", 10),
            retry_backoff_ms=_int(env, "PAIQ_RETRY_BACKOFF_MS", 2000),
            admin_user=env.get("PAIQ_ADMIN_USER") or None,
            admin_password=env.get("PAIQ_ADMIN_PASSWORD") or None,
            write_credentials=env.get("PAIQ_WRITE_CREDENTIALS") == "1",
            log_level=(env.get("PAIQ_LOG_LEVEL") or "info").lower(),
            log_format=env.get("PAIQ_LOG_FORMAT") or "console",
            reconcile_seconds=timing["PAIQ_RECONCILE_SECONDS"],
            stop_grace_seconds=timing["PAIQ_STOP_GRACE_SECONDS"],
            body_timeout_seconds=timing["PAIQ_BODY_TIMEOUT_SECONDS"],
            job_retention_days=_retention_days(env),
            embedded_db_cache=_cache_size(env),
            launcher=_launcher_settings(env),
            job_limits=_job_limits(env),
        )
