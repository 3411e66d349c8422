"""Settings, read once from an injectable mapping (normally ``os.environ``) and passed down.

:class:`PaiqEnv` is the table of every variable: one pydantic-settings field per ``PAIQ_*`` name, with its
default, its bounds and its syntax (:mod:`shared.settings.syntax`). :meth:`Settings.from_env` reads the
given mapping, and only it (never ``os.environ`` behind the caller's back, nor a ``.env`` file: see
:mod:`shared.settings.source`), and arranges the values as the typed tree the services read
(``settings.node``, ``settings.launcher``, ``settings.job_limits``). A wrong value is one
:class:`~shared.errors.SettingsError` naming the variable and its rule ("setting PAIQ_LEASE_SECONDS must be
>= 3, got 2"); when several are wrong, the first in this table's order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, AliasChoices, BeforeValidator, Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from shared.jobconfig.limits import LIMIT_SETTINGS, JobLimits
from shared.settings.source import read
from shared.settings.syntax import (
    check_node_id,
    check_port_or_unset,
    node_id_of_host,
    parse_cache_size,
    parse_days,
    parse_gpu_devices,
    parse_gpus,
    parse_integer,
    parse_network,
    parse_port_range,
    parse_switch,
)

__all__ = ["DEFAULT_OPS_PORTS", "LauncherSettings", "NodeSettings", "PaiqEnv", "Settings", "parse_gpus"]


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
    # "nvidia": a task's GPUs are passed to its container (Docker device requests, NVIDIA's runtime);
    # "none": they are only counted and named in its environment (test clusters of declared GPUs)
    gpu_devices: str = "nvidia"
    # Profiling: every running task's usage sampled this often (0: not at all); a task whose GPUs stay
    # under gpu_idle_percent utilisation for gpu_idle_seconds is flagged (shared.profiling.idle).
    profile_seconds: int = 10
    gpu_idle_percent: int = 5
    gpu_idle_seconds: int = 1800


# Where the scheduler's, status's and launcher's /healthz and /metrics listen by default.
DEFAULT_OPS_PORTS = {"scheduler": 9187, "status": 9188, "launcher": 9189}


@dataclass(frozen=True)
class Settings:
    """Everything a service is configured with; made by :meth:`from_env` alone."""

    mongodb_uri: str | None
    database: str
    mongodb_timeout_seconds: int  # every database call's deadline (the driver's timeoutMS)
    amqp_url: str | None
    exchange: str
    queue_prefix: str
    api_host: str
    api_port: int
    data_dir: Path
    default_fs_uri: str
    docker_url: str | None
    node: NodeSettings
    ops_host: str
    ops_ports: Mapping[str, int]
    lease_seconds: int
    node_timeout_seconds: int
    backfill_bound_seconds: int
    preemptions_per_pass: int  # waiting jobs that may get victims chosen in one pass; 0: no preemption
    virtual_clusters_path: str | None
    exit_spec_path: str | None
    max_platform_retries: int
    retry_backoff_ms: int
    admin_user: str | None
    admin_password: str | None = field(repr=False)
    write_credentials: bool
    log_level: str
    log_format: str
    reconcile_seconds: int
    stop_grace_seconds: int
    body_timeout_seconds: int
    job_retention_days: float  # 0: keep ended jobs forever
    anonymous_heavy_reads: int  # a second, all callers without a token together (services.submit.throttle)
    embedded_db_cache: str  # paiq up's SecantusDB: its WiredTiger cache must hold what is stored
    launcher: LauncherSettings
    job_limits: JobLimits

    @property
    def api_url(self) -> str:
        return f"http://{self.api_host}:{self.api_port}"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """The settings ``env`` gives (an empty value is an unset one), or a SettingsError."""
        values = read(PaiqEnv, env).model_dump()
        node = NodeSettings(**_take(values, NodeSettings))
        launcher = LauncherSettings(**_take(values, LauncherSettings))
        job_limits = JobLimits(**_take(values, JobLimits))
        common_ops_port = values.pop("ops_port")
        ops_ports = {service: values.pop(f"{service}_ops_port") or common_ops_port or default
                     for service, default in DEFAULT_OPS_PORTS.items()}
        data_dir = values["data_dir"]
        values["default_fs_uri"] = values["default_fs_uri"] or f"file://{data_dir / 'fs'}"
        return cls(**values, node=node, launcher=launcher, job_limits=job_limits, ops_ports=ops_ports)


def _take(values: dict[str, Any], into: type[Any]) -> dict[str, Any]:
    """The values of the dataclass ``into``'s fields, taken out of ``values``."""
    return {f.name: values.pop(f.name) for f in fields(into)}


# --- the variables -------------------------------------------------------------------------------------


def _text(check: Callable[[str], object]) -> BeforeValidator:
    """``check`` applied to a variable's text (a default, not text, passes as it is)."""
    return BeforeValidator(lambda raw: check(raw) if isinstance(raw, str) else raw)


Integer = Annotated[int, _text(parse_integer)]
Text = str | None  # unset: None
OpsPort = Annotated[int, _text(parse_integer), AfterValidator(check_port_or_unset)]


def _host_node_id() -> str:
    return node_id_of_host(os.uname().nodename)


def _total_memory_mb() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024))
    except (ValueError, OSError):
        return 8192


def _limit(var: str) -> Any:
    """A limit of one job submission: its default (JobLimits) and bounds (LIMIT_SETTINGS)."""
    [(name, least, most)] = [(n, lo, hi) for n, (v, lo, hi) in LIMIT_SETTINGS.items() if v == var]
    return Field(getattr(JobLimits(), name), alias=var, ge=least, le=most)


_LAUNCHER = LauncherSettings()


class PaiqEnv(BaseSettings):
    """Every variable paiq reads, with its default, bounds and syntax; field names are the attributes of
    :class:`Settings` (or of its node, launcher and job_limits parts) they become."""

    model_config = SettingsConfigDict(frozen=True)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only what the caller passes (shared.settings.source.read: the mapping it was given); never the
        process environment, a .env file or a secrets directory."""
        return (init_settings,)

    # Where the services meet: database, broker, API, files, container engine.
    mongodb_uri: Text = Field(None, alias="PAIQ_MONGODB_URI")
    database: str = Field("paiq", alias="PAIQ_MONGODB_DATABASE")
    mongodb_timeout_seconds: Integer = Field(30, alias="PAIQ_MONGODB_TIMEOUT_SECONDS", ge=1, le=3600)
    amqp_url: Text = Field(None, alias="PAIQ_AMQP_URL")
    exchange: str = Field("paiq.events", alias="PAIQ_EXCHANGE")
    queue_prefix: str = Field("paiq", alias="PAIQ_QUEUE_PREFIX")
    api_host: str = Field("127.0.0.1", alias="PAIQ_API_HOST")
    api_port: Integer = Field(9186, alias="PAIQ_API_PORT")
    data_dir: Annotated[Path, AfterValidator(Path.expanduser)] = Field(
        default_factory=lambda: Path.home() / ".paiq", alias="PAIQ_DATA_DIR")
    default_fs_uri: Text = Field(None, alias="PAIQ_DEFAULT_FS_URI")  # unset: file://<data dir>/fs
    docker_url: Text = Field(None, validation_alias=AliasChoices("PAIQ_DOCKER_URL", "DOCKER_HOST"))
    # This node, as its launcher declares it.
    node_id: Annotated[str, AfterValidator(check_node_id)] = Field(default_factory=_host_node_id, alias="PAIQ_NODE_ID")
    ip: str = Field("127.0.0.1", alias="PAIQ_NODE_IP")
    cpus: Integer = Field(default_factory=lambda: os.cpu_count() or 1, alias="PAIQ_NODE_CPUS")
    memory_mb: Integer = Field(default_factory=_total_memory_mb, alias="PAIQ_NODE_MEMORY_MB")
    gpus: Annotated[tuple[tuple[int, str], ...], _text(parse_gpus)] = Field((), alias="PAIQ_NODE_GPUS")
    port_range: Annotated[tuple[int, int], _text(parse_port_range)] = Field(
        (20000, 29999), alias="PAIQ_NODE_PORT_RANGE")
    # /healthz and /metrics: PAIQ_<SERVICE>_OPS_PORT, else PAIQ_OPS_PORT, else DEFAULT_OPS_PORTS (0: unset).
    ops_host: str = Field("127.0.0.1", alias="PAIQ_OPS_HOST")
    ops_port: OpsPort = Field(0, alias="PAIQ_OPS_PORT")
    scheduler_ops_port: OpsPort = Field(0, alias="PAIQ_SCHEDULER_OPS_PORT")
    status_ops_port: OpsPort = Field(0, alias="PAIQ_STATUS_OPS_PORT")
    launcher_ops_port: OpsPort = Field(0, alias="PAIQ_LAUNCHER_OPS_PORT")
    # Timing.
    reconcile_seconds: Integer = Field(10, alias="PAIQ_RECONCILE_SECONDS", ge=1)
    lease_seconds: Integer = Field(15, alias="PAIQ_LEASE_SECONDS", ge=3)
    node_timeout_seconds: Integer = Field(40, alias="PAIQ_NODE_TIMEOUT_SECONDS", ge=4)
    stop_grace_seconds: Integer = Field(10, alias="PAIQ_STOP_GRACE_SECONDS", ge=0)
    backfill_bound_seconds: Integer = Field(600, alias="PAIQ_BACKFILL_BOUND_SECONDS", ge=0)
    preemptions_per_pass: Integer = Field(4, alias="PAIQ_PREEMPTIONS_PER_PASS", ge=0, le=64)
    body_timeout_seconds: Integer = Field(30, alias="PAIQ_BODY_TIMEOUT_SECONDS", ge=1)
    # Policy files, retries, users, logs, history.
    virtual_clusters_path: Text = Field(None, alias="PAIQ_VIRTUAL_CLUSTERS")
    exit_spec_path: Text = Field(None, alias="PAIQ_EXIT_SPEC")
    max_platform_retries: Integer = Field(10, alias="PAIQ_MAX_PLATFORM_RETRIES")
    retry_backoff_ms: Integer = Field(2000, alias="PAIQ_RETRY_BACKOFF_MS")
    admin_user: Text = Field(None, alias="PAIQ_ADMIN_USER")
    admin_password: Text = Field(None, alias="PAIQ_ADMIN_PASSWORD", repr=False)
    # Only "1" writes them (what `paiq up` sets); any other value leaves them unwritten.
    write_credentials: Annotated[bool, _text(lambda raw: raw == "1")] = Field(False, alias="PAIQ_WRITE_CREDENTIALS")
    log_level: Annotated[str, AfterValidator(str.lower)] = Field("info", alias="PAIQ_LOG_LEVEL")
    log_format: str = Field("console", alias="PAIQ_LOG_FORMAT")
    job_retention_days: Annotated[float, _text(parse_days)] = Field(0.0, alias="PAIQ_JOB_RETENTION_DAYS")
    anonymous_heavy_reads: Integer = Field(4, alias="PAIQ_ANONYMOUS_HEAVY_READS", ge=0, le=10_000)
    embedded_db_cache: Annotated[str, _text(parse_cache_size)] = Field("1G", alias="PAIQ_EMBEDDED_DB_CACHE")
    # How the launcher runs tasks.
    pull_latest: Annotated[bool, _text(parse_switch)] = Field(_LAUNCHER.pull_latest, alias="PAIQ_PULL_LATEST")
    network: Annotated[str, _text(parse_network)] = Field(_LAUNCHER.network, alias="PAIQ_NODE_NETWORK")
    gpu_devices: Annotated[str, _text(parse_gpu_devices)] = Field(_LAUNCHER.gpu_devices, alias="PAIQ_GPU_DEVICES")
    profile_seconds: Integer = Field(_LAUNCHER.profile_seconds, alias="PAIQ_PROFILE_SECONDS", ge=0, le=3600)
    gpu_idle_percent: Integer = Field(_LAUNCHER.gpu_idle_percent, alias="PAIQ_GPU_IDLE_PERCENT", ge=0, le=100)
    gpu_idle_seconds: Integer = Field(_LAUNCHER.gpu_idle_seconds, alias="PAIQ_GPU_IDLE_SECONDS", ge=1)
    code_dir_max_mb: Integer = Field(_LAUNCHER.code_dir_max_mb, alias="PAIQ_CODE_DIR_MAX_MB", ge=1)
    task_log_max_bytes: Integer = Field(_LAUNCHER.task_log_max_bytes, alias="PAIQ_TASK_LOG_MAX_BYTES", ge=1)
    debug_keep_seconds: Integer = Field(_LAUNCHER.debug_keep_seconds, alias="PAIQ_DEBUG_KEEP_SECONDS", ge=1)
    # What one job submission may ask (shared.jobconfig.limits: defaults and bounds in LIMIT_SETTINGS).
    max_job_tasks: Integer = _limit("PAIQ_MAX_JOB_TASKS")
    max_task_roles: Integer = _limit("PAIQ_MAX_TASK_ROLES")
    max_json_values: Integer = _limit("PAIQ_MAX_JSON_VALUES")
    max_json_depth: Integer = _limit("PAIQ_MAX_JSON_DEPTH")
    max_key_bytes: Integer = _limit("PAIQ_MAX_KEY_BYTES")
    max_string_bytes: Integer = _limit("PAIQ_MAX_STRING_BYTES")
    max_document_bytes: Integer = _limit("PAIQ_MAX_JOB_DOCUMENT_BYTES")
