"""What container a task gets, decided purely from its spec and the node's settings.

- labels: who the container belongs to (:class:`services.launcher.engine.tasklabels.TaskLabels`);
- pull: whether to ask the registry before starting (absent, or tagged ``latest`` when configured);
- the command: ``/bin/sh -c <command>`` (after the SSH setup of :mod:`services.launcher.container.sshsetup` when
  the job has a key pair), or for ``isDebug`` jobs a wrapper that, when the command
  fails, says so on stderr (a line :func:`parse_debug_marker` recognises) and keeps the container
  running for the reservation time before exiting with the command's code. A kept container still
  holds its resources and can be entered (``docker exec``) with the task's environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from services.launcher.container.sshsetup import COMMAND_PREFIX, ssh_files
from services.launcher.engine.driver import ContainerSpec
from services.launcher.engine.tasklabels import TaskLabels
from shared.records import TaskSpec
from shared.settings.model import LauncherSettings
from shared.tasks.envvars import task_environment
from shared.tasks.jobkeys import JobKey
from shared.tasks.plugins import NO_PLUGINS, TaskPlugins, wrapped_command

DEBUG_WRAPPER = (
    '/bin/sh -c "$1"; code=$?; '
    'if [ "$code" -ne 0 ]; then '
    'echo "[paiq] debug: exit code $code; container kept for $2 s" >&2; sleep "$2"; '
    'fi; exit "$code"'
)
_DEBUG_MARKER = re.compile(r"^\[paiq\] debug: exit code (\d+); container kept for (\d+) s$")
NO_JOB_ENV: Mapping[str, str] = MappingProxyType({})


def labels(spec: TaskSpec, node_id: str) -> dict[str, str]:
    return TaskLabels.of(spec, node_id).to_labels()


def is_latest(image: str) -> bool:
    """Tagged ``latest`` or not tagged at all (which means ``latest``); never a pinned digest."""
    if "@" in image:
        return False
    last = image.rsplit("/", 1)[-1]  # a registry's host:port is not a tag
    return last.partition(":")[2] in ("", "latest")


def wants_pull(image: str, *, present: bool, pull_latest: bool) -> bool:
    return not present or (pull_latest and is_latest(image))


def parse_debug_marker(line: str) -> tuple[int, int] | None:
    """``(exit code, seconds kept)`` when ``line`` is the debug wrapper's announcement."""
    m = _DEBUG_MARKER.match(line.rstrip("\n"))
    return (int(m.group(1)), int(m.group(2))) if m else None


def container_spec(spec: TaskSpec, *, name: str, node_id: str, code_dir: str, settings: LauncherSettings,
                   job_env: Mapping[str, str] = NO_JOB_ENV, ssh: JobKey | None = None,
                   plugins: TaskPlugins = NO_PLUGINS, node_ip: str = "") -> ContainerSpec:
    """The container of one task; its environment is the launch's ``job_env`` with the task's own over it.
    On the bridge (the default) it joins the task network and its ports are published on ``node_ip``, the
    address its peers (and its own ``PAI_*_IP`` variables) name.
    With the job's key pair (``ssh``), the container gets its SSH files and starts sshd first
    (:mod:`services.launcher.container.sshsetup`); the job's runtime plugins (``plugins``,
    :mod:`shared.tasks.plugins`) put their lines around the command, their keys and their mounts in."""
    command = wrapped_command(spec.command, plugins)
    if ssh is not None:
        if plugins.user_keys:
            ssh = ssh.model_copy(update={"user_keys": tuple(dict.fromkeys((*ssh.user_keys, *plugins.user_keys)))})
        command = COMMAND_PREFIX + command
    args: tuple[str, ...] = ()
    if spec.is_debug:
        command, args = DEBUG_WRAPPER, ("paiq-debug", command, str(settings.debug_keep_seconds))
    bridge = settings.network == "bridge"
    return ContainerSpec(
        name=name, image=spec.image, command=command, command_args=args, env=task_environment(job_env, spec.env),
        labels=labels(spec, node_id), cpus=spec.cpus, memory_mb=spec.memory_mb, shm_mb=spec.shm_mb,
        gpus=spec.gpus if settings.gpu_devices == "nvidia" else (), code_dir=code_dir,
        network_mode=settings.task_network if bridge else "host",
        published_ports=tuple(sorted({p for ps in spec.ports.values() for p in ps})) if bridge else (),
        publish_ip=node_ip if bridge else "", pids_limit=settings.pids_limit,
        log_max_bytes=max(settings.task_log_max_bytes, 1024 * 1024),
        files=ssh_files(ssh) if ssh is not None else (),
        binds=tuple((m.host_path, m.container_path, m.read_only) for m in plugins.mounts),
    )
