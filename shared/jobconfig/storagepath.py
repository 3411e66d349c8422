"""Where a job's ``authFile`` and ``codeDir`` may point: inside the default file system, nowhere else.

Pure: these functions look at strings only. What only the file system can tell (symlinks, existence,
size) the launcher finds out itself, then checks the real path again with :func:`is_within`, so a
symlink cannot lead out of the root either.

The default file system is ``$PAI_DEFAULT_FS_URI`` (``PAIQ_DEFAULT_FS_URI``), a ``file://`` directory.
A job names a file or directory in it as an absolute path, a ``file://`` URI, or a path relative to
the root; ``..`` is refused wherever it stands (even where it would stay inside), as are other URI
schemes, NUL bytes and the root itself (which holds every user's files).
"""

from __future__ import annotations

import posixpath
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict


class StoragePath(BaseModel):
    """A path inside the storage root, absolute and normalised (not yet checked against symlinks)."""

    model_config = ConfigDict(frozen=True)
    path: str


class StorageRefusal(BaseModel):
    model_config = ConfigDict(frozen=True)
    reason: str


def _local(uri_or_path: str) -> str | StorageRefusal:
    """``file:///a/b`` (or ``file://localhost/a/b``) -> ``/a/b``; a plain path as it is."""
    if "://" not in uri_or_path:
        return uri_or_path
    parts = urlsplit(uri_or_path)
    if parts.scheme != "file":
        return StorageRefusal(reason=f"only file:// locations are supported, not {parts.scheme}://")
    if parts.netloc not in {"", "localhost"}:
        return StorageRefusal(reason=f"file:// URIs must name a local path, not host {parts.netloc!r}")
    if parts.query or parts.fragment:
        return StorageRefusal(reason="file:// URIs must not carry a query or a fragment")
    return unquote(parts.path)


def storage_root(default_fs_uri: str) -> StoragePath | StorageRefusal:
    """The local directory behind ``$PAI_DEFAULT_FS_URI``."""
    local = _local(default_fs_uri.strip())
    if isinstance(local, StorageRefusal):
        return StorageRefusal(reason=f"the default file system {default_fs_uri} is not local: {local.reason}")
    if not local.startswith("/"):
        return StorageRefusal(reason=f"the default file system {default_fs_uri} must be an absolute file:// path")
    return StoragePath(path=posixpath.normpath(local).replace("//", "/"))


def is_within(root: str, path: str) -> bool:
    """``path`` is ``root`` or below it (both absolute and normalised)."""
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root if root == "/" else root + "/")


def resolve_in_storage(value: str, root: str, *, what: str) -> StoragePath | StorageRefusal:
    """Where ``value`` (a job's ``authFile`` or ``codeDir``, after substitution) lies under ``root``."""
    local = _local(value.strip())
    if isinstance(local, StorageRefusal):
        return StorageRefusal(reason=f"{what} {value}: {local.reason}")
    if not local:
        return StorageRefusal(reason=f"{what} is empty")
    if "\0" in local:
        return StorageRefusal(reason=f"{what} must not contain a NUL byte")
    if ".." in local.split("/"):
        return StorageRefusal(reason=f"{what} {value}: '..' is not allowed in the path")
    absolute = local if local.startswith("/") else posixpath.join(root, local)
    path = posixpath.normpath(absolute)
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    if not is_within(root, path):
        return StorageRefusal(reason=f"{what} {value} is outside the default file system {root}")
    if path == root.rstrip("/"):
        return StorageRefusal(reason=f"{what} must be inside the default file system {root}, not its root")
    return StoragePath(path=path)
