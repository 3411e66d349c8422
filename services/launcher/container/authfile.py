"""OpenPAI's registry auth file: three lines, registry server, username, password.

It is read from the default file system only (see :mod:`shared.jobconfig.storagepath`), just before the pull
that needs it; the password lives in a ``SecretStr`` from then on and no message ever quotes the file.
"""

from __future__ import annotations

import os

from pydantic import SecretStr

from services.launcher.engine.driver import RegistryAuth
from shared.errors import DriverError
from shared.jobconfig.storagepath import StorageRefusal, is_within, resolve_in_storage, storage_root
from shared.lifecycle import exitcodes

DOCKER_HUB = "https://index.docker.io/v1/"
MAX_AUTH_FILE_BYTES = 64 * 1024


def _refused(reason: str) -> DriverError:
    return DriverError("authFile refused", exit_code=exitcodes.IMAGE_PULL_FAILED,
                       reason=f"image could not be pulled: {reason}")


def registry_server(text: str) -> str:
    """The engine's name for a registry (Docker Hub's by any of its names, or when none is given)."""
    text = text.strip()
    return DOCKER_HUB if text in {"", "docker.io", "index.docker.io", "registry-1.docker.io"} else text


def parse_auth_file(text: str) -> RegistryAuth:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 3:
        raise _refused(f"authFile must have 3 lines (registry, username, password); it has {len(lines)}")
    return RegistryAuth(server=registry_server(lines[0]), username=lines[1], password=SecretStr(lines[2]))


def read_auth_file(value: str, default_fs_uri: str) -> RegistryAuth:
    """The credentials of a job's ``authFile`` (a path or file:// URI in the default file system).

    Blocking (file I/O): call it through ``asyncio.to_thread``.
    """
    root = storage_root(default_fs_uri)
    if isinstance(root, StorageRefusal):
        raise _refused(root.reason)
    where = resolve_in_storage(value, root.path, what="authFile")
    if isinstance(where, StorageRefusal):
        raise _refused(where.reason)
    real = os.path.realpath(where.path)
    if not is_within(os.path.realpath(root.path), real):
        raise _refused(f"authFile {value} leads outside the default file system (through a symbolic link)")
    try:
        with open(real, "rb") as f:
            raw = f.read(MAX_AUTH_FILE_BYTES + 1)
    except OSError as e:
        raise _refused(f"authFile {value} cannot be read: {e.strerror}") from None
    if len(raw) > MAX_AUTH_FILE_BYTES:
        raise _refused(f"authFile {value} is larger than {MAX_AUTH_FILE_BYTES} bytes")
    return parse_auth_file(raw.decode(errors="replace"))
