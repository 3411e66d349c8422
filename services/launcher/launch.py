"""Starting a task's container, at most once however often the launch arrives.

Three things make a launch idempotent: the container's name is derived from the task
(``shared.tasks.launchspec.container_name``), so the engine itself refuses a second one; a launch already in
flight in this process is joined, not repeated; and the task's run in MongoDB (claimed before the
container is created) says whether the task already ran here, so a task whose container ended and
was removed is never started again by a late or replayed launch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from services.launcher.announce import exited_event, progress_event, publish_with_starts, started_event, watch
from services.launcher.container.authfile import read_auth_file
from services.launcher.container.codedir import CodeDir, resolve_code_dir
from services.launcher.container.gitclone import CloneError, clone_all, clones_folder
from services.launcher.container.jobsecrets import command_to_run, plugin_refs, registry_login, ssh_key
from services.launcher.container.spec import container_spec, wants_pull
from services.launcher.container.sshsetup import NO_SSHD, SSHD_PATHS
from services.launcher.decide import Action, Prompt, Seen, container_state, decide, run_seen, still_wanted
from services.launcher.deps import LauncherDeps
from services.launcher.engine.driver import PullError, RegistryAuth
from services.launcher.stopping import stop_container
from shared.errors import DriverError
from shared.events import CloudEvent
from shared.lifecycle import exitcodes
from shared.lifecycle.taskretry import relaunch_delay_ms
from shared.ops.metrics import LAUNCH, count_launch_failure
from shared.records import JobRecord, TaskSpec, TaskSubState
from shared.taskref import TaskRef
from shared.tasks.jobkeys import StoredJobKey
from shared.tasks.launchspec import ref_container_name
from shared.tasks.plugins import PluginRefError, TaskPlugins, task_plugins

log = structlog.get_logger("paiq.launcher")
READ_AGAIN_AFTER_SECONDS = 1.0  # a launch that took longer (a pull, a clone) reads its job again before it starts


async def launch_and_report(deps: LauncherDeps, spec: TaskSpec, job_env: Mapping[str, str]) -> None:
    """Start one task in the background (a launch command's, or reconcile's relaunch) and publish what came
    of it; ``job_env`` is its launch's shared environment (``spec.env`` holds the task's own). A request
    while the task's launch is in flight joins it, and what came of it is published once."""
    name = ref_container_name(spec)
    await asyncio.shield(deps.work.launches.join(name, f"launch-{name}",
                                                 lambda: _launch_and_publish(deps, spec, name, job_env)))


async def _launch_and_publish(deps: LauncherDeps, spec: TaskSpec, name: str, job_env: Mapping[str, str]) -> None:
    await publish_with_starts(deps, await _launch(deps, spec, name, job_env))


async def _fail(deps: LauncherDeps, key: TaskRef, code: int, reason: str) -> list[CloudEvent]:
    log.warning("task could not start", job_id=key.job_id, role=key.role, index=key.index, exit_code=code,
                reason=reason)
    await deps.logs.set_ended(key, exit_code=code, reason=reason, diagnostics="", container_id=None)
    count_launch_failure(deps.node.node_id, code)
    return [exited_event(key, deps.node.node_id, code, reason)]


async def _launch(deps: LauncherDeps, spec: TaskSpec, name: str, job_env: Mapping[str, str]) -> list[CloudEvent]:
    delay_ms = relaunch_delay_ms(spec.task_attempt, deps.settings.retry_backoff_ms)
    if delay_ms:  # a re-run (taskRetryCount): not in a tight loop; a relaunch meanwhile joins this one
        log.info("running the task again after a pause", job_id=spec.job_id, role=spec.role, index=spec.index,
                 task_attempt=spec.task_attempt, delay_ms=delay_ms)
        await asyncio.sleep(delay_ms / 1000)
    began = time.monotonic()
    existing, job, ssh = await asyncio.gather(deps.driver.find(name), deps.store.get_job(spec.job_id),
                                              deps.store.job_key(spec.job_id))
    key = spec.ref
    seen = Seen(prompt=Prompt.LAUNCH, task=key, job=job, container=container_state(existing))
    decision = decide(seen)
    if decision.action is Action.CLAIM:
        run = await deps.logs.claim(key, deps.node.node_id)
        decision = decide(seen.model_copy(update={"run": run_seen(run)}))
    log_ids = {"job_id": spec.job_id, "role": spec.role, "index": spec.index}
    match decision.action:
        case Action.SKIP_STALE:
            log.info("launch skipped: the job is gone, over, or on another attempt", **log_ids)
        case Action.ADOPT if existing is not None:
            log.info("task already has a running container; not starting another", **log_ids,
                     container=existing.id[:12])
            watch(deps, key, existing.id, is_debug=spec.is_debug)
            deps.work.started_announced(existing.id)
            return [started_event(key, deps.node.node_id, existing.id)]
        case Action.REPORT_LOST:
            return await _fail(deps, key, exitcodes.ENGINE_FAILURE, decision.why)
        case Action.START if job is not None:
            return await _prepare_and_start(deps, spec, key, name, began, job_env, ssh, job)
        case _:
            log.info("not starting the task", why=decision.why, **log_ids)
    return []


async def _prepare_and_start(deps: LauncherDeps, spec: TaskSpec, key: TaskRef, name: str, began: float,
                             job_env: Mapping[str, str], ssh: StoredJobKey | None, job: JobRecord) -> list[CloudEvent]:
    code_dir = ""
    if spec.code_dir:
        found = await asyncio.to_thread(resolve_code_dir, spec.code_dir, deps.settings.default_fs_uri,
                                        deps.options.code_dir_max_mb)
        if not isinstance(found, CodeDir):
            return await _fail(deps, key, exitcodes.CONFIG_ERROR, found.reason)
        code_dir = found.host_path
    try:
        plugins = task_plugins(job.config.extras, spec.role, spec.index, first_role=job.config.task_roles[0].name,
                               user=job.user, storages=deps.storages,
                               refs=plugin_refs(job.config, deps.settings.secrets_key))
    except DriverError as e:
        return await _fail(deps, key, e.exit_code, e.reason)
    except PluginRefError as e:
        return await _fail(deps, key, exitcodes.CONFIG_ERROR, str(e))
    if plugins.clones:
        try:
            cloned = await clone_all(plugins.clones, clones_folder(deps.settings, name))
        except (CloneError, OSError) as e:
            return await _fail(deps, key, exitcodes.CONFIG_ERROR, str(e))
        plugins = plugins.model_copy(update={"mounts": (*plugins.mounts, *cloned)})
    return await _start(deps, spec, key, name, code_dir, began, job_env, ssh, job, plugins)


async def _start(deps: LauncherDeps, spec: TaskSpec, key: TaskRef, name: str, code_dir: str, began: float,
                 job_env: Mapping[str, str], ssh: StoredJobKey | None, job: JobRecord,
                 plugins: TaskPlugins) -> list[CloudEvent]:
    """Pull if needed, then create and start the container, unless the job no longer wants it. A v2
    job's sealed registry credentials and secrets, and the job's SSH private key, are opened here
    (:mod:`services.launcher.container.jobsecrets`)."""
    node_id = deps.node.node_id
    try:
        image = await ensure_image(deps, spec, key, registry_login(job.config, spec.role, deps.settings.secrets_key))
        # A pull (or a clone) can take minutes: the job may have ended or moved on meanwhile, and its task's
        # resources been given to another. Then nothing starts. Read again only then: just read, the check after
        # the start (below) is enough.
        slow = image.pulled or time.monotonic() - began > READ_AGAIN_AFTER_SECONDS
        if slow and not await _still_wanted(deps, spec):
            await deps.logs.set_ended(key, exit_code=exitcodes.STOPPED_BY_USER, container_id=None, diagnostics="",
                                      reason="not started: the job ended or moved to another attempt first")
            log.info("launch dropped: the job ended while its image was pulled", job_id=spec.job_id)
            return []
        command = command_to_run(job.config, spec.command, deps.settings.secrets_key)
        container_id = await deps.driver.run(container_spec(
            spec.model_copy(update={"command": command}), name=name, node_id=node_id, code_dir=code_dir,
            settings=deps.options, job_env=job_env, ssh=ssh_key(ssh, deps.settings.secrets_key), plugins=plugins,
            node_ip=deps.address))
    except DriverError as e:
        return await _fail(deps, key, e.exit_code, e.reason)
    watch(deps, key, container_id, is_debug=spec.is_debug)  # before any await: it may end at once
    deps.work.started_announced(container_id)  # before any await too: a pass meanwhile does not say it again
    if not await _still_wanted(deps, spec):
        deps.work.spawn(f"stop-{container_id[:12]}", stop_container(deps, container_id, by_user=False))
    await deps.logs.set_running(key, container_id)
    LAUNCH.observe(time.monotonic() - began)
    if ssh is not None:  # after the start is reported: a task's start never waits on this
        deps.work.spawn(f"ssh-check-{container_id[:12]}", _say_if_no_sshd(deps, key, container_id, image.image_id))
    log.info("task started", job_id=spec.job_id, role=spec.role, index=spec.index, container=container_id[:12])
    return [started_event(key, node_id, container_id)]


async def _say_if_no_sshd(deps: LauncherDeps, key: TaskRef, container_id: str, image_id: str | None) -> None:
    """When the task's image has no sshd, the task's message says ssh into it is unavailable. Looked for once
    per image (up to four stats of a container's files), on the first container of it."""
    known, found = deps.work.sshd_of(image_id)
    if not known:
        try:
            found = await deps.driver.first_file(container_id, SSHD_PATHS)
        except DriverError as e:
            log.warning("could not tell whether the task's image has sshd", container=container_id[:12],
                        reason=e.reason)
            return
        deps.work.found_sshd(image_id, found)
    if found is None:
        await deps.publish([progress_event(key, deps.node.node_id, TaskSubState.NONE, NO_SSHD)])


async def _still_wanted(deps: LauncherDeps, spec: TaskSpec) -> bool:
    return still_wanted(await deps.store.get_job(spec.job_id), spec.attempt, spec.role, spec.index,
                        spec.task_attempt)


@dataclass(frozen=True)
class Ensured:
    """The task's image on the node: whether it was pulled (or a pull tried), and its ID (None: not known)."""

    pulled: bool
    image_id: str | None


async def ensure_image(deps: LauncherDeps, spec: TaskSpec, key: TaskRef,
                       inline: RegistryAuth | None = None) -> Ensured:
    """Pull the task's image when the node lacks it (or it is ``latest`` and the node re-pulls those),
    with the credentials given inline (a v2 role's ``auth``, opened) or else in the job's authFile; whether
    it pulled (or tried to), and the image's ID as the node has it then.

    Tasks needing the same image with the same credentials (one authFile, or one role's) share one pull.
    A refresh of an image the node has that fails for any reason but refused credentials falls back to
    the node's copy.
    """
    present_id = await deps.driver.image_id(spec.image)
    present = present_id is not None
    if not wants_pull(spec.image, present=present, pull_latest=deps.options.pull_latest):
        return Ensured(pulled=False, image_id=present_id)
    auth = inline
    if auth is None and spec.auth_file:
        auth = await asyncio.to_thread(read_auth_file, spec.auth_file, deps.settings.default_fs_uri)
    await deps.publish([progress_event(key, deps.node.node_id, TaskSubState.PULLING, spec.image)])
    shared_key = (spec.image, f"{spec.job_id}\0{spec.role}" if inline is not None else spec.auth_file)
    if shared_key not in deps.work.pulls:
        log.info("pulling image", image=spec.image, with_auth=auth is not None, refresh=present)
    pull = deps.work.pulls.join(shared_key, f"pull-{spec.image}", lambda: deps.driver.pull(spec.image, auth))
    try:
        await asyncio.shield(pull)
    except PullError as e:
        if present and not e.login_refused:
            log.warning("could not refresh the image; the node's copy is used", image=spec.image, reason=e.reason)
            return Ensured(pulled=True, image_id=present_id)
        raise
    return Ensured(pulled=True, image_id=await deps.driver.image_id(spec.image))
