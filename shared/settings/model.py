"""Settings, read once from an injectable mapping (normally ``os.environ``) and passed down.

:class:`Settings` is the one table of every variable a service reads, as a tree of frozen pydantic models:
each field is one ``PAIQ_*`` variable (its alias) with its default, bounds and syntax
(:mod:`shared.settings.syntax`), and a field with no variable is a part read from the same variables
(``settings.node``, ``settings.launcher``, ``settings.job_limits``). :class:`CliSettings` is the few the
``paiq`` command reads. ``from_env`` reads the given mapping, and only it (never ``os.environ`` behind the
caller's back, nor a ``.env`` file: see :mod:`shared.settings.source`). A wrong value is one
:class:`~shared.errors.SettingsError` naming the variable and its rule ("setting PAIQ_LEASE_SECONDS must be
>= 3, got 2"); when several are wrong, the first in this table's order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, AliasChoices, BeforeValidator, Field, ValidationError, create_model
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from shared.jobconfig.limits import LIMIT_SETTINGS, JobLimits
from shared.jobconfig.sealing import key_problem
from shared.notify.destinations import parse_allow
from shared.settings.credentials import credentials_path
from shared.settings.refusals import settings_error
from shared.settings.source import MappingSource, ReadAs
from shared.settings.syntax import (
    check_amqp_url,
    check_mongodb_uri,
    check_network_name,
    check_node_id,
    check_port_or_unset,
    node_id_of_host,
    parse_cache_size,
    parse_days,
    parse_gpu_devices,
    parse_gpus,
    parse_hours,
    parse_integer,
    parse_network,
    parse_port_range,
    parse_switch,
)

__all__ = ["DEFAULT_OPS_PORTS", "CliSettings", "EnvModel", "JobLimitSettings", "LauncherSettings", "NodeSettings",
           "NotifySettings", "Settings", "parse_gpus"]


class EnvModel(BaseSettings):
    """A settings model or part: frozen, its fields' aliases the variables, read by :meth:`from_env`."""

    # enable_decoding=False: a variable's text goes to its field's validators, never through json.loads.
    # Fields are read by their variables only (validate_by_name would read ``ip`` or ``network`` too).
    model_config = SettingsConfigDict(frozen=True, case_sensitive=True, env_ignore_empty=True,
                                      enable_decoding=False)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only what the caller passes (from_env: the mapping it was given); never the process environment, a
        .env file or a secrets directory."""
        return (init_settings,)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        """The settings ``env`` gives (an empty value is an unset one), or a SettingsError."""
        try:
            return cls(**MappingSource(cls, env)())
        except ValidationError as e:
            # from None: pydantic's account of the same refusal is many lines and a link, and adds nothing.
            raise settings_error(cls, e.errors()[0]) from None


# --- the syntaxes -------------------------------------------------------------------------------------


def _text(check: Callable[[str], object]) -> BeforeValidator:
    """``check`` applied to a variable's text (a default, not text, passes as it is)."""
    return BeforeValidator(lambda raw: check(raw) if isinstance(raw, str) else raw)


Integer = Annotated[int, _text(parse_integer)]
Text = str | None  # unset: None
OpsPort = Annotated[int, _text(parse_integer), AfterValidator(check_port_or_unset)]
DataDir = Annotated[Path, AfterValidator(Path.expanduser)]


def _secrets_key(text: str) -> str:
    problem = key_problem(text)
    if problem is not None:
        raise ValueError(problem)
    return text


def _data_dir() -> Any:
    """PAIQ_DATA_DIR, read by the services and by the CLI (its saved login)."""
    return Field(default_factory=lambda: Path.home() / ".paiq", alias="PAIQ_DATA_DIR")


def _host_node_id() -> str:
    return node_id_of_host(os.uname().nodename)


def _total_memory_mb() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024))
    except (ValueError, OSError):
        return 8192


def _file_system_in_data_dir(values: dict[str, Any]) -> str:
    """PAIQ_DEFAULT_FS_URI unset: file://<data dir>/fs. PAIQ_DATA_DIR is read before it; were it refused, its
    error would be the one reported and this value never used."""
    data_dir = values.get("data_dir")
    return f"file://{data_dir / 'fs'}" if isinstance(data_dir, Path) else ""


# --- the parts ----------------------------------------------------------------------------------------


class NodeSettings(EnvModel):
    """What a launcher agent declares about its node."""

    node_id: Annotated[str, AfterValidator(check_node_id)] = Field(default_factory=_host_node_id, alias="PAIQ_NODE_ID")
    # Where the node's tasks are reached (every PAI_*_IP of its tasks, and where bridge networking publishes
    # their ports). Unset: 127.0.0.1 on the host network; on the bridge, the task network's gateway (an
    # address of this host that its tasks reach too). See ``LauncherSettings.network``.
    ip: str | None = Field(None, alias="PAIQ_NODE_IP")
    cpus: Integer = Field(default_factory=lambda: os.cpu_count() or 1, alias="PAIQ_NODE_CPUS")
    memory_mb: Integer = Field(default_factory=_total_memory_mb, alias="PAIQ_NODE_MEMORY_MB")
    gpus: Annotated[tuple[tuple[int, str], ...], _text(parse_gpus)] = Field((), alias="PAIQ_NODE_GPUS")
    port_range: Annotated[tuple[int, int], _text(parse_port_range)] = Field(
        (20000, 29999), alias="PAIQ_NODE_PORT_RANGE")


class LauncherSettings(EnvModel):
    """How a launcher agent runs tasks on its node."""

    # Re-pull images tagged `latest` (or untagged) at each launch.
    pull_latest: Annotated[bool, _text(parse_switch)] = Field(True, alias="PAIQ_PULL_LATEST")
    # "bridge": tasks on the task network (task_network), isolated from the host's own services and from one
    # another but for their declared ports, each published 1:1 on the node's address. "host": tasks on the
    # host's network, reaching everything the host listens on (the operator's explicit choice, for jobs that
    # need the host's interfaces, e.g. InfiniBand).
    network: Annotated[str, _text(parse_network)] = Field("bridge", alias="PAIQ_NODE_NETWORK")
    # The Docker network of bridged tasks, made by the launcher when missing (no traffic between its
    # containers but through published ports).
    task_network: Annotated[str, _text(check_network_name)] = Field("paiq-tasks", alias="PAIQ_TASK_NETWORK")
    # A task's processes and threads at most (a fork bomb stays in its container); 0: no limit.
    pids_limit: Integer = Field(4096, alias="PAIQ_TASK_PIDS_LIMIT", ge=0, le=4_194_304)
    # What a task may write to its container's own file system (not its mounts), in MiB; past it the task
    # is stopped and fails saying so. Checked every disk_check_seconds. 0: no limit.
    disk_limit_mb: Integer = Field(51200, alias="PAIQ_TASK_DISK_MB", ge=0)
    disk_check_seconds: Integer = Field(30, alias="PAIQ_TASK_DISK_CHECK_SECONDS", ge=1, le=3600)
    # "nvidia": a task's GPUs are passed to its container (Docker device requests, NVIDIA's runtime);
    # "none": they are only counted and named in its environment (test clusters of declared GPUs).
    gpu_devices: Annotated[str, _text(parse_gpu_devices)] = Field("nvidia", alias="PAIQ_GPU_DEVICES")
    # Profiling: every running task's usage sampled this often (0: not at all); a task whose GPUs stay
    # under gpu_idle_percent utilisation for gpu_idle_seconds is flagged (shared.profiling.idle).
    profile_seconds: Integer = Field(10, alias="PAIQ_PROFILE_SECONDS", ge=0, le=3600)
    gpu_idle_percent: Integer = Field(5, alias="PAIQ_GPU_IDLE_PERCENT", ge=0, le=100)
    gpu_idle_seconds: Integer = Field(1800, alias="PAIQ_GPU_IDLE_SECONDS", ge=1)
    code_dir_max_mb: Integer = Field(200, alias="PAIQ_CODE_DIR_MAX_MB", ge=1)
    task_log_max_bytes: Integer = Field(4 * 1024 * 1024, alias="PAIQ_TASK_LOG_MAX_BYTES", ge=1)
    debug_keep_seconds: Integer = Field(7 * 24 * 3600, alias="PAIQ_DEBUG_KEEP_SECONDS", ge=1)


class NotifySettings(EnvModel):
    """The notify service (services/notify, docs "Notifications"): email over SMTP, webhooks, retries and
    the rate limit."""

    # Email: unset PAIQ_SMTP_HOST sends none (such a delivery fails, saying so).
    smtp_host: Text = Field(None, alias="PAIQ_SMTP_HOST")
    smtp_port: Integer = Field(587, alias="PAIQ_SMTP_PORT", ge=1, le=65535)
    # none: plain SMTP; starttls: upgrade after connecting (submission, 587); tls: TLS from the start (465).
    smtp_tls: Literal["none", "starttls", "tls"] = Field("starttls", alias="PAIQ_SMTP_TLS")
    smtp_user: Text = Field(None, alias="PAIQ_SMTP_USER")
    smtp_password: Text = Field(None, alias="PAIQ_SMTP_PASSWORD", repr=False)
    smtp_from: str = Field("paiq@localhost", alias="PAIQ_SMTP_FROM")
    # The portal's address in messages' links (unset: the API's, http://PAIQ_API_HOST:PAIQ_API_PORT).
    portal_url: Text = Field(None, alias="PAIQ_PORTAL_URL")
    # One try's bound (connect, send, answer), and how many tries run at once to one endpoint and in all.
    timeout_seconds: Integer = Field(10, alias="PAIQ_NOTIFY_TIMEOUT_SECONDS", ge=1, le=300)
    endpoint_concurrency: Integer = Field(2, alias="PAIQ_NOTIFY_ENDPOINT_CONCURRENCY", ge=1, le=64)
    concurrency: Integer = Field(64, alias="PAIQ_NOTIFY_CONCURRENCY", ge=1, le=1024)
    # A failing endpoint: tries, the first wait (doubling), and how long after the change it is given up.
    max_tries: Integer = Field(8, alias="PAIQ_NOTIFY_MAX_TRIES", ge=1, le=100)
    retry_base_ms: Integer = Field(1000, alias="PAIQ_NOTIFY_RETRY_BASE_MS", ge=1)
    max_age_seconds: Integer = Field(3600, alias="PAIQ_NOTIFY_MAX_AGE_SECONDS", ge=1)
    # Messages per recipient about one user's jobs per window (0: no limit); past it, one digest per window.
    rate_limit: Integer = Field(20, alias="PAIQ_NOTIFY_RATE_LIMIT", ge=0)
    rate_window_seconds: Integer = Field(3600, alias="PAIQ_NOTIFY_RATE_WINDOW_SECONDS", ge=1)
    # How long delivery records are kept (a user's GET of their deliveries shows this far back).
    keep_days: Annotated[float, _text(parse_days)] = Field(7.0, alias="PAIQ_NOTIFY_KEEP_DAYS", gt=0)
    # Inside addresses a webhook may point to (shared.notify.destinations): host names, addresses, CIDR ranges
    # or *. Unset: none (loopback, link-local with the metadata endpoint, private and unique-local refused).
    webhook_allow: Annotated[tuple[str, ...], _text(parse_allow)] = Field((), alias="PAIQ_NOTIFY_WEBHOOK_ALLOW")


# What one job submission may ask: JobLimits' fields under the variables of LIMIT_SETTINGS, with their
# defaults (JobLimits) and bounds (LIMIT_SETTINGS); read as a JobLimits (ReadAs), the value the job-config
# pipeline takes.
_LIMIT_FIELDS: dict[str, Any] = {name: (Integer, Field(getattr(JobLimits(), name), alias=var, ge=least, le=most))
                                 for name, (var, least, most) in LIMIT_SETTINGS.items()}
JobLimitSettings = create_model("JobLimitSettings", __base__=EnvModel, __doc__="The limits of one job submission.",
                                **_LIMIT_FIELDS)


# --- the whole --------------------------------------------------------------------------------------------

# Where the scheduler's, status's and launcher's /healthz and /metrics listen by default.
DEFAULT_OPS_PORTS = {"scheduler": 9187, "status": 9188, "launcher": 9189, "notify": 9190}


class Settings(EnvModel):
    """Everything a service is configured with; made by :meth:`from_env`. The fields' order is the order in
    which wrong variables are found (the first is named)."""

    # Where the services meet: database, broker, API, files, container engine.
    # Both always log in: a user of their own (never an open mongod, never RabbitMQ's guest).
    mongodb_uri: Annotated[str | None, _text(check_mongodb_uri)] = Field(None, alias="PAIQ_MONGODB_URI", repr=False)
    database: str = Field("paiq", alias="PAIQ_MONGODB_DATABASE")
    # Every database call's deadline (the driver's timeoutMS).
    mongodb_timeout_seconds: Integer = Field(30, alias="PAIQ_MONGODB_TIMEOUT_SECONDS", ge=1, le=3600)
    amqp_url: Annotated[str | None, _text(check_amqp_url)] = Field(None, alias="PAIQ_AMQP_URL", repr=False)
    exchange: str = Field("paiq.events", alias="PAIQ_EXCHANGE")
    queue_prefix: str = Field("paiq", alias="PAIQ_QUEUE_PREFIX")
    api_host: str = Field("127.0.0.1", alias="PAIQ_API_HOST")
    api_port: Integer = Field(9186, alias="PAIQ_API_PORT")
    data_dir: DataDir = _data_dir()
    default_fs_uri: str = Field(default_factory=_file_system_in_data_dir, alias="PAIQ_DEFAULT_FS_URI")
    docker_url: Text = Field(None, validation_alias=AliasChoices("PAIQ_DOCKER_URL", "DOCKER_HOST"))
    # This node, as its launcher declares it.
    node: NodeSettings
    # /healthz and /metrics: PAIQ_<SERVICE>_OPS_PORT, else PAIQ_OPS_PORT, else DEFAULT_OPS_PORTS (0: unset).
    ops_host: str = Field("127.0.0.1", alias="PAIQ_OPS_HOST")
    ops_port: OpsPort = Field(0, alias="PAIQ_OPS_PORT")
    scheduler_ops_port: OpsPort = Field(0, alias="PAIQ_SCHEDULER_OPS_PORT")
    status_ops_port: OpsPort = Field(0, alias="PAIQ_STATUS_OPS_PORT")
    launcher_ops_port: OpsPort = Field(0, alias="PAIQ_LAUNCHER_OPS_PORT")
    notify_ops_port: OpsPort = Field(0, alias="PAIQ_NOTIFY_OPS_PORT")
    # Timing.
    reconcile_seconds: Integer = Field(10, alias="PAIQ_RECONCILE_SECONDS", ge=1)
    lease_seconds: Integer = Field(15, alias="PAIQ_LEASE_SECONDS", ge=3)
    node_timeout_seconds: Integer = Field(40, alias="PAIQ_NODE_TIMEOUT_SECONDS", ge=4)
    stop_grace_seconds: Integer = Field(10, alias="PAIQ_STOP_GRACE_SECONDS", ge=0)
    backfill_bound_seconds: Integer = Field(600, alias="PAIQ_BACKFILL_BOUND_SECONDS", ge=0)
    # Waiting jobs that may get victims chosen in one pass; 0: no preemption.
    preemptions_per_pass: Integer = Field(4, alias="PAIQ_PREEMPTIONS_PER_PASS", ge=0, le=64)
    body_timeout_seconds: Integer = Field(30, alias="PAIQ_BODY_TIMEOUT_SECONDS", ge=1)
    # Policy files, retries, users, logs, history.
    virtual_clusters_path: Text = Field(None, alias="PAIQ_VIRTUAL_CLUSTERS")
    # The operator's storages (shared.storageconfig: teamwise_storage, GET /api/v2/storages); unset: none.
    storage_config_path: Text = Field(None, alias="PAIQ_STORAGE_CONFIG")
    exit_spec_path: Text = Field(None, alias="PAIQ_EXIT_SPEC")
    max_platform_retries: Integer = Field(10, alias="PAIQ_MAX_PLATFORM_RETRIES")
    retry_backoff_ms: Integer = Field(2000, alias="PAIQ_RETRY_BACKOFF_MS")
    admin_user: Text = Field(None, alias="PAIQ_ADMIN_USER")
    admin_password: Text = Field(None, alias="PAIQ_ADMIN_PASSWORD", repr=False)
    # bcrypt's cost for passwords set from now on (2**rounds rounds; 12 is bcrypt's default).
    password_hash_rounds: Integer = Field(12, alias="PAIQ_PASSWORD_HASH_ROUNDS", ge=4, le=31)
    # Seals jobs' secrets and registry credentials at rest (shared.jobconfig.sealing); unset: a job with
    # secrets is refused (`paiq up` makes one in its data directory).
    secrets_key: Annotated[str | None, _text(_secrets_key)] = Field(None, alias="PAIQ_SECRETS_KEY", repr=False)
    # Only "1" writes them (what `paiq up` sets); any other value leaves them unwritten.
    write_credentials: Annotated[bool, _text(lambda raw: raw == "1")] = Field(False, alias="PAIQ_WRITE_CREDENTIALS")
    log_level: Annotated[str, AfterValidator(str.lower)] = Field("info", alias="PAIQ_LOG_LEVEL")
    log_format: str = Field("console", alias="PAIQ_LOG_FORMAT")
    # 0: keep ended jobs forever.
    job_retention_days: Annotated[float, _text(parse_days)] = Field(0.0, alias="PAIQ_JOB_RETENTION_DAYS")
    # How long the journal keeps events for consumers that resume (shared.db.journal; 0: for ever).
    event_retention_hours: Annotated[float, _text(parse_hours)] = Field(24.0, alias="PAIQ_EVENT_RETENTION_HOURS")
    # A second, all callers without a token together (services.submit.routes.throttle).
    anonymous_heavy_reads: Integer = Field(4, alias="PAIQ_ANONYMOUS_HEAVY_READS", ge=0, le=10_000)
    # paiq up's SecantusDB: its WiredTiger cache must hold what is stored (auto: shared.db.footprint).
    embedded_db_cache: Annotated[str, _text(parse_cache_size)] = Field("AUTO", alias="PAIQ_EMBEDDED_DB_CACHE")
    # How the launcher runs tasks.
    launcher: LauncherSettings
    # The notify service: SMTP, webhooks, retries, rate limit.
    notify: NotifySettings
    # What one job submission may ask (shared.jobconfig.limits: defaults and bounds in LIMIT_SETTINGS).
    job_limits: Annotated[JobLimits, ReadAs(JobLimitSettings)]

    @property
    def api_url(self) -> str:
        return f"http://{self.api_host}:{self.api_port}"

    @property
    def ops_ports(self) -> Mapping[str, int]:
        """Each service's ops port: its own variable, else PAIQ_OPS_PORT, else its default."""
        own = {"scheduler": self.scheduler_ops_port, "status": self.status_ops_port,
               "launcher": self.launcher_ops_port, "notify": self.notify_ops_port}
        return {service: own[service] or self.ops_port or default for service, default in DEFAULT_OPS_PORTS.items()}


class CliSettings(EnvModel):
    """What the ``paiq`` command reads besides its options; each overrides its saved login
    (``$PAIQ_DATA_DIR/credentials.json``)."""

    data_dir: DataDir = _data_dir()
    api: Text = Field(None, alias="PAIQ_API")
    user: Text = Field(None, alias="PAIQ_USER")
    token: Text = Field(None, alias="PAIQ_TOKEN", repr=False)

    @property
    def credentials_path(self) -> Path:
        return credentials_path(self.data_dir)
