"""OpenPAI's runtime plugins (``extras["com.microsoft.pai.runtimeplugin"]``) as pure decisions per task.

OpenPAI's runtime ran each plugin's ``init.py`` in the task's init container; each appended shell lines to
``precommands.sh`` or ``postcommands.sh`` (under ``set -o errexit``, or ``set +o errexit`` for
``failurePolicy: ignore``), and the task ran ``precommands.sh; user.sh; postcommands.sh``. paiq decides the
same from the job config and the task (:func:`task_plugins`) and the launcher runs :func:`wrapped_command`:

- ``cmd``: ``preCommands``/``postCommands`` (or ``callbacks`` ``taskStarts``/``taskSucceeds``) around the
  user's commands, in order; a failing pre command ends the task with its exit code; post commands run
  only when the user's commands succeeded;
- ``ssh``: paiq's own SSH setup (:mod:`services.launcher.container.sshsetup`) runs for every job:
  ``jobssh`` between tasks always works; ``userssh.value`` adds the user's public key to
  ``authorized_keys``; ``sshbarrier`` waits (pre command) until every peer's sshd answers;
- ``git``: ``git clone [options] repo_uri`` before the commands, by the launcher on the node (as OpenPAI's
  init container did: the image needs no git), the clone bound at ``clone_dir`` (default
  ``/usr/local/pai/code``, OpenPAI's); a clone that fails fails the task;
- ``tensorboard``: on the first role's first task, a server on the reserved ``tensorboard`` port
  (:data:`TENSORBOARD_PORT`): ``tensorboard --logdir ... --bind_all`` where the image has it, else
  busybox ``httpd`` serving the log directory (so the address answers);
- ``teamwise_storage``: the operator's storages (:mod:`shared.storageconfig`) mounted at their paths.

Other plugins are accepted and named in the submission's warnings (:func:`plugin_warnings`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from shared.records import JobRecord
from shared.storageconfig import StorageConfig, StorageConfigs, requested_storages, storages_for

PLUGIN_KEY = "com.microsoft.pai.runtimeplugin"
KNOWN_PLUGINS = ("ssh", "cmd", "git", "tensorboard", "teamwise_storage")
TENSORBOARD_PORT = "tensorboard"  # the port label paiq reserves on the first role
DEFAULT_CLONE_DIR = "/usr/local/pai/code"
SSH_BARRIER_MINUTES = 30


class PluginUse(BaseModel):
    """One entry of the job's plugin list, as written."""

    model_config = ConfigDict(frozen=True)
    plugin: str
    parameters: dict[str, Any] = {}
    failure_policy: str = "fail"
    taskroles: tuple[str, ...] | None = None

    def applies_to(self, role: str) -> bool:
        return self.taskroles is None or role in self.taskroles


class Mount(BaseModel):
    model_config = ConfigDict(frozen=True)
    host_path: str
    container_path: str
    read_only: bool = False


class GitClone(BaseModel):
    """A repository the launcher clones before the task starts, bound into it at ``target``."""

    model_config = ConfigDict(frozen=True)
    uri: str
    options: tuple[str, ...] = ()
    target: str = DEFAULT_CLONE_DIR

    def argv(self, into: str) -> list[str]:
        return ["git", "clone", *self.options, "--", self.uri, into]


class TaskPlugins(BaseModel):
    """What the plugins add to one task: shell lines before and after its commands, mounts, SSH keys,
    repositories to clone."""

    model_config = ConfigDict(frozen=True)
    pre: tuple[str, ...] = ()
    post: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    user_keys: tuple[str, ...] = ()
    clones: tuple[GitClone, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.pre or self.post or self.mounts or self.user_keys or self.clones)


NO_PLUGINS = TaskPlugins()


def plugin_uses(extras: Mapping[str, Any] | None) -> tuple[PluginUse, ...]:
    """The job's plugin entries (malformed ones skipped: OpenPAI's runtime failed on them at start)."""
    entries = (extras or {}).get(PLUGIN_KEY)
    if not isinstance(entries, list):
        return ()
    out = []
    for entry in entries:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("plugin"), str):
            continue
        params = entry.get("parameters")
        roles = entry.get("taskroles")
        out.append(PluginUse(
            plugin=entry["plugin"], parameters=dict(params) if isinstance(params, Mapping) else {},
            failure_policy=str(entry.get("failurePolicy") or "fail"),
            taskroles=tuple(str(r) for r in roles) if isinstance(roles, list) else None))
    return tuple(out)


def with_prerequisite_plugins(extras: Mapping[str, Any], document: Mapping[str, Any]) -> dict[str, Any]:
    """``extras`` with the plugins a v2 document declares as prerequisites (``plugin:
    com.microsoft.pai.runtimeplugin.<name>``) ahead of its own list, each for the roles naming it, as
    OpenPAI's ``initializer.collect_plugin_configs``: ``failurePolicy`` kept, ``type`` dropped, every other
    key the parameters."""
    roles = document.get("taskRoles")
    prerequisites = document.get("prerequisites")
    if not isinstance(roles, Mapping) or not isinstance(prerequisites, list):
        return dict(extras)
    found: list[dict[str, Any]] = []
    for item in prerequisites:
        plugin = item.get("plugin") if isinstance(item, Mapping) else None
        if not isinstance(plugin, str) or not plugin.startswith(PLUGIN_KEY + "."):
            continue
        users = [r for r, role in roles.items()
                 if isinstance(role, Mapping) and item.get("name") in (role.get("prerequisites") or ())]
        if not users:
            continue
        entry: dict[str, Any] = {"plugin": plugin[len(PLUGIN_KEY) + 1:], "taskroles": users,
                                 "parameters": {k: v for k, v in item.items()
                                                if k not in ("plugin", "failurePolicy", "type")}}
        if "failurePolicy" in item:
            entry["failurePolicy"] = item["failurePolicy"]
        found.append(entry)
    if not found:
        return dict(extras)
    own = extras.get(PLUGIN_KEY)
    return {**extras, PLUGIN_KEY: [*found, *(own if isinstance(own, list) else [])]}


def plugin_warnings(extras: Mapping[str, Any] | None) -> tuple[str, ...]:
    """A warning for each plugin paiq does not run (accepted, as OpenPAI's rest-server accepted it)."""
    return tuple(f"extras.{PLUGIN_KEY}[{i}]: runtime plugin {u.plugin!r} is not supported by paiq; it is ignored "
                 f"(supported: {', '.join(KNOWN_PLUGINS)})"
                 for i, u in enumerate(plugin_uses(extras)) if u.plugin not in KNOWN_PLUGINS)


def uses_plugin(extras: Mapping[str, Any] | None, name: str) -> bool:
    return any(u.plugin == name for u in plugin_uses(extras))


def teamwise_storage_names(extras: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Every storage the job's ``teamwise_storage`` entries name (checked at submit)."""
    return tuple(n for u in plugin_uses(extras) if u.plugin == "teamwise_storage"
                 for n in requested_storages(u.parameters) or ())


class PluginRefError(Exception):
    """A ``<% $... %>`` reference in a plugin's parameters that names nothing (OpenPAI's init failed on it)."""

    def __init__(self, plugin: str, reference: str) -> None:
        super().__init__(f"runtime plugin {plugin}: its parameters' reference <% ${reference} %> names nothing")
        self.plugin = plugin
        self.reference = reference


_REF = re.compile(r"<%\s*\$([\s\S]*?)\s*%>")
_STEP = re.compile(r"([^.\[\]]+)|\[\s*(\d+)\s*\]")


def _resolve(reference: str, roots: Mapping[str, Any]) -> Any:
    value: Any = roots
    for name, index in _STEP.findall(reference):
        if name:
            if not isinstance(value, Mapping) or name not in value:
                raise KeyError(reference)
            value = value[name]
        elif isinstance(value, list) and int(index) < len(value):
            value = value[int(index)]
        else:
            raise KeyError(reference)
    return value


def rendered_parameters(use: PluginUse, roots: Mapping[str, Any]) -> PluginUse:
    """``use`` with each ``<% $parameters.x %>`` / ``<% $secrets.y %>`` in its parameters' strings replaced
    by the value's text (OpenPAI's ``initializer.replace_ref``; ``roots``: the job's ``parameters`` and
    ``secrets``, opened); raises :class:`PluginRefError` for a reference to nothing."""
    def render(value: Any) -> Any:
        if isinstance(value, str):
            def one(m: re.Match[str]) -> str:
                try:
                    return str(_resolve(m.group(1), roots))
                except KeyError:
                    raise PluginRefError(use.plugin, m.group(1)) from None
            return _REF.sub(one, value)
        if isinstance(value, Mapping):
            return {k: render(v) for k, v in value.items()}
        if isinstance(value, list):
            return [render(v) for v in value]
        return value

    if "<%" not in repr(use.parameters):
        return use
    return use.model_copy(update={"parameters": render(use.parameters)})


def _guarded(lines: Iterable[str], policy: str) -> list[str]:
    """OpenPAI's ``inject_commands``: ``set -e`` around a plugin's lines, ``set +e`` for ``ignore``."""
    body = [str(line) for line in lines]
    if not body:
        return []
    if policy.lower() == "ignore":
        return ["set +e", *body, "set -e"]
    return ["set -e", *body]


def _cmd(use: PluginUse) -> tuple[list[str], list[str]]:
    params = use.parameters
    if isinstance(params.get("callbacks"), list):
        pre = [c for cb in params["callbacks"] if isinstance(cb, Mapping) and cb.get("event") == "taskStarts"
               for c in cb.get("commands") or ()]
        post = [c for cb in params["callbacks"] if isinstance(cb, Mapping) and cb.get("event") == "taskSucceeds"
                for c in cb.get("commands") or ()]
        return pre, post
    return list(params.get("preCommands") or ()), list(params.get("postCommands") or ())


def _git(use: PluginUse) -> GitClone | list[str]:
    """The clone, or (no ``repo_uri``) lines failing the task as OpenPAI's plugin did."""
    uri = use.parameters.get("repo_uri")
    if not isinstance(uri, str) or not uri:
        return ["echo '[paiq] git: the plugin has no repo_uri' >&2", "exit 1"]
    target = str(use.parameters.get("clone_dir") or DEFAULT_CLONE_DIR)
    options = use.parameters.get("options") or []
    return GitClone(uri=uri, options=tuple(str(o) for o in (options if isinstance(options, list) else [options])),
                    target=target if target.startswith("/") else f"/pai/{target}")


def tensorboard_port_variable(role: str, index: int) -> str:
    return f"PAI_PORT_LIST_{role}_{index}_{TENSORBOARD_PORT}"


def _tensorboard(use: PluginUse, role: str, index: int) -> list[str]:
    logdirs = use.parameters.get("logdir")
    spec = ",".join(f"{k}:{v}" for k, v in logdirs.items()) if isinstance(logdirs, Mapping) else str(logdirs or "")
    first = str(next(iter(logdirs.values()))) if isinstance(logdirs, Mapping) and logdirs else (spec or "/pai")
    port = f"${{{tensorboard_port_variable(role, index)}%%,*}}"
    tb_dir = shlex.quote(first) if not isinstance(logdirs, Mapping) or len(logdirs) < 2 else shlex.quote(spec)
    flag = "--logdir" if not isinstance(logdirs, Mapping) or len(logdirs) < 2 else "--logdir_spec"
    return [
        f"mkdir -p {shlex.quote(first)}",
        f"if command -v tensorboard >/dev/null 2>&1; then tensorboard {flag}={tb_dir} --port={port} --bind_all "
        f">/tmp/paiq-tensorboard.log 2>&1 & "
        f"elif command -v httpd >/dev/null 2>&1; then httpd -p {port} -h {shlex.quote(first)}; "
        "else echo '[paiq] tensorboard: the image has neither tensorboard nor httpd' >&2; fi",
    ]


_BARRIER = (
    "__paiq_deadline=$(( $(date +%s) + {seconds} )); "
    "for __paiq_host in $(awk '$1 == \"Host\" {{print $2}}' /root/.ssh/config 2>/dev/null); do "
    "[ \"$__paiq_host\" = \"$PAI_CURRENT_TASK_ROLE_NAME-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX\" ] && continue; "
    "until ssh -q -o BatchMode=yes -o ConnectTimeout=5 \"$__paiq_host\" exit 0 </dev/null; do "
    "if [ \"$(date +%s)\" -ge \"$__paiq_deadline\" ]; then "
    "echo \"[paiq] ssh barrier: $__paiq_host did not answer in time\" >&2; exit 1; fi; sleep 2; done; done"
)


def _ssh(use: PluginUse) -> tuple[list[str], tuple[str, ...]]:
    params = use.parameters
    user = params.get("userssh")
    keys: tuple[str, ...] = ()
    if isinstance(user, Mapping) and isinstance(user.get("value"), str) and user["value"].strip():
        keys = tuple(k.strip() for k in user["value"].splitlines() if k.strip())
    pre: list[str] = []
    if str(params.get("sshbarrier", "false")).lower() == "true":
        minutes = params.get("sshbarriertimeout", SSH_BARRIER_MINUTES)
        seconds = int(minutes) * 60 if isinstance(minutes, int | str) and str(minutes).isdigit() else 1800
        pre = [_BARRIER.format(seconds=seconds)]
    return pre, keys


def _mounts(storages: Iterable[StorageConfig]) -> tuple[Mount, ...]:
    return tuple(Mount(host_path=s.host_path, container_path=s.mount_path, read_only=s.read_only) for s in storages)


def task_plugins(extras: Mapping[str, Any] | None, role: str, index: int, *, first_role: str, user: str,
                 storages: StorageConfigs, groups: Iterable[str] = (),
                 refs: Mapping[str, Any] | None = None) -> TaskPlugins:
    """What the job's plugins do in one task (``first_role``: the job's first role, where TensorBoard runs;
    ``refs``: the job's ``parameters`` and opened ``secrets`` their parameters may name). Each plugin's
    post lines come before those of the plugins listed before it, as OpenPAI ran its post scripts."""
    pre: list[str] = []
    post: list[str] = []
    keys: list[str] = []
    mounts: list[Mount] = []
    clones: list[GitClone] = []
    members = tuple(groups)
    for listed in plugin_uses(extras):
        if not listed.applies_to(role):
            continue
        use = rendered_parameters(listed, refs or {})
        match use.plugin:
            case "cmd":
                before, after = _cmd(use)
                pre += _guarded(before, use.failure_policy)
                post[:0] = _guarded(after, use.failure_policy)
            case "ssh":
                barrier, user_keys = _ssh(use)
                pre += _guarded(barrier, use.failure_policy)
                keys += user_keys
            case "git":
                clone = _git(use)
                if isinstance(clone, GitClone):
                    clones.append(clone)
                else:
                    pre += _guarded(clone, use.failure_policy)
            case "tensorboard" if role == first_role and index == 0:
                pre += _guarded(_tensorboard(use, role, index), use.failure_policy)
            case "teamwise_storage":
                mounts += _mounts(storages_for(storages, requested_storages(use.parameters), user, members))
    return TaskPlugins(pre=tuple(pre), post=tuple(post), mounts=tuple(dict.fromkeys(mounts)),
                       user_keys=tuple(dict.fromkeys(keys)), clones=tuple(clones))


def wrapped_command(command: str, plugins: TaskPlugins) -> str:
    """The task's shell text: pre lines, the user's commands (in a subshell: their ``exit`` ends only them),
    then, when they succeeded, the post lines; the task ends with the user's code (or a failed line's)."""
    if not plugins.pre and not plugins.post:
        return command
    lines = [*plugins.pre, "set +e", "(", command, ")", "__paiq_code=$?",
             '[ "$__paiq_code" -eq 0 ] || exit "$__paiq_code"', *plugins.post, "exit 0"]
    return "\n".join(lines) + "\n"


def tensorboard_address(extras: Mapping[str, Any] | None, first_role_task: tuple[str, Mapping[str, Any]] | None
                        ) -> str | None:
    """``http://ip:port`` of the job's TensorBoard: the first role's first task's ip and ``tensorboard`` port
    (``first_role_task``: that task's ip and ports by label, once placed); ``None`` without the plugin."""
    if first_role_task is None or not uses_plugin(extras, "tensorboard"):
        return None
    ip, ports = first_role_task
    found = ports.get(TENSORBOARD_PORT)
    port = found[0] if isinstance(found, list | tuple) and found else found
    return f"http://{ip}:{port}" if ip and isinstance(port, int) else None


def job_tensorboard_address(job: JobRecord) -> str | None:
    """The job's TensorBoard address (``http://ip:port``) once its first role's first task is placed; ``None``
    for a job without the tensorboard plugin (for the job detail answer's ``tensorboardAddress``)."""
    if not job.config.task_roles:
        return None
    first = job.config.task_roles[0].name
    task = next((t for t in job.tasks if t.role == first and t.index == 0), None)
    return tensorboard_address(job.config.extras, (task.ip or "", task.ports) if task is not None else None)
