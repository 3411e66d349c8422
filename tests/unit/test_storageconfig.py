"""Operator storage configs (shared.storageconfig): parsed, who may use which, what a task mounts."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.storageconfig import (
    StorageConfigError,
    load_storage_configs,
    parse_storage_configs,
    requested_storages,
    storage_refusal,
    storages_for,
)

DOC = """
storages:
  - {name: team, hostPath: /mnt/nfs/team, mountPath: /mnt/team, default: true, users: [alice], groups: [ml]}
  - {name: open, hostPath: /data/open, mountPath: /mnt/open, readOnly: true}
  - {name: extra, hostPath: /data/extra, mountPath: /mnt/extra, users: [bob]}
"""


def test_parsed_from_yaml_or_a_json_list() -> None:
    configs = parse_storage_configs(DOC)
    assert [s.name for s in configs.storages] == ["team", "open", "extra"]
    team = configs.get("team")
    assert team is not None and team.host_path == "/mnt/nfs/team" and team.mount_path == "/mnt/team"
    listed = parse_storage_configs('[{"name": "a", "hostPath": "/a", "mountPath": "/b"}]')
    assert listed.storages[0].read_only is False


@pytest.mark.parametrize("text", [
    "storages: [{name: a, hostPath: relative, mountPath: /b}]",
    "storages: [{name: a, hostPath: /a, mountPath: /b/../c}]",
    "storages: [{name: a, hostPath: /a, mountPath: /b, colour: red}]",
    "storages: [{name: a, hostPath: /a, mountPath: /b}, {name: a, hostPath: /c, mountPath: /d}]",
    "storages: [",
])
def test_invalid_files_are_refused(text: str) -> None:
    with pytest.raises(StorageConfigError):
        parse_storage_configs(text)


@pytest.mark.parametrize(("names", "user", "groups", "refusal"), [
    (("team",), "alice", (), None),
    (("team",), "carol", ("ml",), None),
    (("team",), "carol", (), "user carol is not allowed to use storage team"),
    (("open", "extra"), "bob", (), None),
    (("open", "extra"), "alice", (), "user alice is not allowed to use storage extra"),
    (("nope",), "alice", (), "storage nope does not exist (teamwise_storage's storageConfigNames)"),
    (None, "carol", (), None),
])
def test_who_may_use_which(names: tuple[str, ...] | None, user: str, groups: tuple[str, ...],
                           refusal: str | None) -> None:
    denied = storage_refusal(parse_storage_configs(DOC), names, user, groups)
    assert (None if denied is None else str(denied)) == refusal
    if denied is not None:
        assert denied.unknown == (denied.storage == "nope")


def test_what_a_task_mounts() -> None:
    configs = parse_storage_configs(DOC)
    assert [s.name for s in storages_for(configs, None, "alice")] == ["team"]  # the defaults theirs
    assert storages_for(configs, None, "carol") == ()
    assert [s.name for s in storages_for(configs, ("open", "extra"), "bob")] == ["open", "extra"]
    assert requested_storages({"storageConfigNames": ["a", "b"]}) == ("a", "b")
    assert requested_storages({}) is None and requested_storages(None) is None


def test_unset_means_none(tmp_path: Path) -> None:
    assert load_storage_configs(None).storages == ()
    path = tmp_path / "s.yaml"
    path.write_text(DOC)
    assert len(load_storage_configs(str(path)).storages) == 3
    with pytest.raises(StorageConfigError):
        load_storage_configs(str(tmp_path / "missing.yaml"))
