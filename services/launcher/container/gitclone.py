"""The git runtime plugin's clones, made on the node before the task starts (OpenPAI's init container
cloned them: the task's image needs no git) and bound into the task (:mod:`shared.tasks.plugins`)."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

from shared.jobconfig.storagepath import StoragePath, storage_root
from shared.settings.model import Settings
from shared.tasks.plugins import GitClone, Mount

CLONE_TIMEOUT_S = 300


class CloneError(Exception):
    def __init__(self, uri: str, reason: str) -> None:
        super().__init__(f"git: cannot clone {uri}: {reason}")
        self.uri = uri
        self.reason = reason


def clones_folder(settings: Settings, container: str) -> Path:
    """Where a task's clones live on the node, from its launch until its container is removed: under the
    default file system's root (a launcher in a container sees it at the engine's path, as docker-compose
    mounts it), else under the data directory."""
    root = storage_root(settings.default_fs_uri)
    base = Path(root.path) / ".paiq" / "git" if isinstance(root, StoragePath) else settings.data_dir / "git"
    return base / container


async def remove_clones(settings: Settings, container: str) -> None:
    await asyncio.to_thread(shutil.rmtree, clones_folder(settings, container), True)


async def clone_into(clone: GitClone, folder: Path) -> Mount:
    """Clone afresh into ``folder`` (a repeated launch starts over); the mount that binds it at its target."""
    await asyncio.to_thread(shutil.rmtree, folder, True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    proc = await asyncio.create_subprocess_exec(
        *clone.argv(str(folder)), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    try:
        _, err = await asyncio.wait_for(proc.communicate(), CLONE_TIMEOUT_S)
    except TimeoutError as e:
        proc.kill()
        await proc.wait()
        raise CloneError(clone.uri, f"not done in {CLONE_TIMEOUT_S} s") from e
    if proc.returncode != 0:
        raise CloneError(clone.uri, err.decode(errors="replace").strip()[-500:] or f"exit {proc.returncode}")
    return Mount(host_path=str(folder), container_path=clone.target)


async def clone_all(clones: tuple[GitClone, ...], root: Path) -> tuple[Mount, ...]:
    """Each clone under ``root`` (one folder per clone), in order."""
    return tuple([await clone_into(c, root / str(i)) for i, c in enumerate(clones)])
