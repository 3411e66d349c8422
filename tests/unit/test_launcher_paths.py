"""Where a job's codeDir and authFile may point (shared.jobconfig.storagepath): a table of accepted and refused
values."""

from __future__ import annotations

import pytest

from shared.jobconfig.storagepath import StoragePath, StorageRefusal, is_within, resolve_in_storage, storage_root

pytestmark = pytest.mark.unit

ROOT = "/data/fs"


@pytest.mark.parametrize(("value", "path"), [
    ("/data/fs/code/alice/job1", "/data/fs/code/alice/job1"),
    ("file:///data/fs/code", "/data/fs/code"),
    ("file://localhost/data/fs/code", "/data/fs/code"),
    ("file:///data/fs/with%20space", "/data/fs/with space"),
    ("code/alice", "/data/fs/code/alice"),  # relative: inside the root
    ("/data/fs/a//b/./c/", "/data/fs/a/b/c"),
    ("  /data/fs/code  ", "/data/fs/code"),
])
def test_paths_inside_the_root_are_accepted(value: str, path: str) -> None:
    assert resolve_in_storage(value, ROOT, what="codeDir") == StoragePath(path=path)


@pytest.mark.parametrize(("value", "says"), [
    ("/etc", "outside the default file system"),
    ("/var/run/docker.sock", "outside the default file system"),
    ("/data/fsx/code", "outside the default file system"),  # a sibling sharing the prefix
    ("/data/fs/../../etc", "'..' is not allowed"),
    ("/data/fs/code/../other", "'..' is not allowed"),  # refused even where it would stay inside
    ("../etc", "'..' is not allowed"),
    ("file:///etc/passwd", "outside the default file system"),
    ("file:///data/fs/%2E%2E/etc", "'..' is not allowed"),  # encoded dots are decoded first
    ("hdfs://namenode:9000/code", "only file:// locations are supported"),
    ("http://example.com/code", "only file:// locations are supported"),
    ("file://otherhost/data/fs/code", "must name a local path"),
    ("file:///data/fs/code?x=1", "must not carry a query"),
    ("/data/fs/code\0/x", "NUL"),
    ("/data/fs", "not its root"),
    ("file:///data/fs/", "not its root"),
    ("", "is empty"),
])
def test_escapes_and_foreign_locations_are_refused(value: str, says: str) -> None:
    refused = resolve_in_storage(value, ROOT, what="codeDir")
    assert isinstance(refused, StorageRefusal), refused
    assert says in refused.reason


@pytest.mark.parametrize(("uri", "root"), [
    ("file:///root/.paiq/fs", "/root/.paiq/fs"),
    ("file:///root/.paiq/fs/", "/root/.paiq/fs"),
    ("/srv/fs", "/srv/fs"),
])
def test_the_root_is_the_local_directory_of_the_default_fs(uri: str, root: str) -> None:
    assert storage_root(uri) == StoragePath(path=root)


@pytest.mark.parametrize("uri", ["hdfs://nn:9000/", "relative/fs"])
def test_a_default_fs_that_is_not_a_local_directory_is_refused(uri: str) -> None:
    assert isinstance(storage_root(uri), StorageRefusal)


@pytest.mark.parametrize(("root", "path", "inside"), [
    ("/a", "/a", True), ("/a", "/a/b", True), ("/a/", "/a/b", True),
    ("/a", "/ab", False), ("/a", "/", False), ("/", "/etc", True),
])
def test_is_within(root: str, path: str, inside: bool) -> None:
    assert is_within(root, path) is inside
