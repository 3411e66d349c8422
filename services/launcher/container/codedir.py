"""A job's ``codeDir`` checked on the node's file system before it is mounted read-only at /pai/code.

The lexical rules are :mod:`shared.jobconfig.storagepath`'s; here the path is resolved for real (symlinks
followed), checked again against the real root, and measured. What is mounted is the resolved path,
so the engine is never handed a symlink to follow.
"""

from __future__ import annotations

import os
import stat

from pydantic import BaseModel, ConfigDict

from shared.jobconfig.storagepath import StorageRefusal, is_within, resolve_in_storage, storage_root


class CodeDir(BaseModel):
    model_config = ConfigDict(frozen=True)
    host_path: str
    size_bytes: int


def _size_up_to(path: str, limit: int) -> int:
    """Bytes of regular files under ``path`` (symlinks not followed), stopping once over ``limit``."""
    total = 0
    pending = [path]
    while pending and total <= limit:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    pending.append(entry.path)
                elif stat.S_ISREG(st.st_mode):
                    total += st.st_size
    return total


def resolve_code_dir(value: str, default_fs_uri: str, max_mb: int) -> CodeDir | StorageRefusal:
    """Where ``value`` really is, if it may be mounted. Blocking: call it through ``asyncio.to_thread``."""
    root = storage_root(default_fs_uri)
    if isinstance(root, StorageRefusal):
        return root
    where = resolve_in_storage(value, root.path, what="codeDir")
    if isinstance(where, StorageRefusal):
        return where
    real_root = os.path.realpath(root.path)
    real = os.path.realpath(where.path)
    if not is_within(real_root, real) or real == real_root:
        return StorageRefusal(reason=f"codeDir {value} leads outside the default file system "
                                     "(through a symbolic link)")
    if not os.path.isdir(real):
        return StorageRefusal(reason=f"codeDir {value} does not exist or is not a directory")
    limit = max_mb * 1024 * 1024
    try:
        size = _size_up_to(real, limit)
    except OSError as e:
        return StorageRefusal(reason=f"codeDir {value} cannot be read: {e.strerror}")
    if size > limit:
        return StorageRefusal(reason=f"codeDir {value} is larger than {max_mb} MB (PAIQ_CODE_DIR_MAX_MB)")
    return CodeDir(host_path=real, size_bytes=size)
