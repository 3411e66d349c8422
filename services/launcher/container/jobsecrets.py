"""What a protocol v2 task needs from its job's sealed secrets, opened at the last moment.

The scheduler's launch carries the task's image and its command as mapped (``<% $secrets.x %>`` still
written, so no secret travels in an event); the launcher reads the job's stored config, whose secrets and
registry credentials are sealed (:mod:`shared.jobconfig.sealing`), and opens them with the node's
``PAIQ_SECRETS_KEY`` only here:

- :func:`registry_login`: the credentials of the role's image, given inline (a ``dockerimage``
  prerequisite's ``auth``): the role's own, else the job's when the role runs the job's image;
- :func:`command_to_run`: the command with its ``$secrets`` rendered as OpenPAI's runtime did
  (:func:`shared.jobconfig.v2.render.render_secrets`): what the container runs, never stored or logged;
- :func:`ssh_key`: the job's SSH key pair, its private key opened (:mod:`shared.tasks.jobkeys`) just before
  the container's files are written.

A value that cannot be opened (no key on this node, another key sealed it) fails the task with a reason
naming the setting, never the value.
"""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr

from services.launcher.container.authfile import registry_server
from services.launcher.engine.driver import RegistryAuth
from shared.errors import DriverError
from shared.jobconfig.model import JobConfig
from shared.jobconfig.sealing import SealingError, open_registry_auth, open_secrets
from shared.jobconfig.v2.render import render_secrets
from shared.lifecycle import exitcodes
from shared.tasks.jobkeys import JobKey, StoredJobKey
from shared.tasks.plugins import PLUGIN_KEY

INLINE = "the dockerimage's auth"  # where the credentials came from, as a refusal names it


def registry_login(config: JobConfig, role_name: str, key: str | None) -> RegistryAuth | None:
    """The inline credentials the role's image is pulled with (None: none given)."""
    role = config.role(role_name)
    sealed = role.registry_auth
    if sealed is None and config.image_of(role) == config.image:
        sealed = config.registry_auth
    if sealed is None:
        return None
    try:
        auth = open_registry_auth(sealed, key)
    except SealingError as e:
        raise DriverError("registry credentials sealed", exit_code=exitcodes.IMAGE_PULL_FAILED,
                          reason=f"image could not be pulled: {e}") from None
    if auth is None or not (auth.username or auth.password):
        return None
    return RegistryAuth(server=registry_server(auth.registry_uri), username=auth.username,
                        password=SecretStr(auth.password), source=INLINE)


def command_to_run(config: JobConfig, command: str, key: str | None) -> str:
    """The task's command with the job's secrets rendered in (the command as it is without secrets)."""
    if not config.secrets:
        return command
    try:
        secrets = open_secrets(config, key)
    except SealingError as e:
        raise DriverError("secrets sealed", exit_code=exitcodes.CONFIG_ERROR,
                          reason=f"the job's secrets cannot be given to its command: {e}") from None
    return render_secrets(command, secrets)


def plugin_refs(config: JobConfig, key: str | None) -> dict[str, Any]:
    """What the job's runtime plugins' parameters may name: its ``parameters`` and its ``secrets``, opened
    only when it has plugins and secrets (:func:`shared.tasks.plugins.rendered_parameters`)."""
    refs: dict[str, Any] = {"parameters": config.parameters or {}, "secrets": {}}
    if config.secrets and PLUGIN_KEY in config.extras:
        try:
            refs["secrets"] = open_secrets(config, key) or {}
        except SealingError as e:
            raise DriverError("secrets sealed", exit_code=exitcodes.CONFIG_ERROR,
                              reason=f"the job's secrets cannot be given to its runtime plugins: {e}") from None
    return refs


def ssh_key(stored: StoredJobKey | None, key: str | None) -> JobKey | None:
    """The job's key pair with its private key opened, for the container's files (None: the job has none)."""
    if stored is None:
        return None
    try:
        return stored.opened(key)
    except SealingError as e:
        raise DriverError("ssh key sealed", exit_code=exitcodes.CONFIG_ERROR,
                          reason=f"the job's SSH key cannot be put in its container: {e}") from None
