"""Operator-defined storages (OpenPAI's storage configs, the ``teamwise_storage`` runtime plugin): pure.

An operator names a YAML or JSON file in ``PAIQ_STORAGE_CONFIG``::

    storages:
      - name: team-data            # what jobs ask for (storageConfigNames) and GET /api/v2/storages lists
        hostPath: /mnt/nfs/team    # a directory (or an NFS export) already mounted on every node
        mountPath: /mnt/team       # where the task sees it
        readOnly: false
        default: true              # mounted when the plugin names no storage
        users: [alice]             # who may use it: these users and the members of these groups
        groups: [ml]               # (both empty: everyone)

The submit service refuses a job naming a storage its user may not use (:func:`storage_refusal`); the
launcher mounts the storages a task gets (:func:`storages_for`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from shared.errors import PaiqError


class StorageConfigError(PaiqError):
    """The storage config file cannot be read or is not valid (a service that reads it at start exits saying so)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"storage config {path}: {reason}")
        self.path = path
        self.reason = reason


def _absolute(value: str) -> str:
    if not PurePosixPath(value).is_absolute() or ".." in PurePosixPath(value).parts:
        raise ValueError(f"must be an absolute path without '..', got {value!r}")
    return value


class StorageConfig(BaseModel):
    """One storage: a host directory mounted into the tasks of the users and groups it names."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    host_path: str = Field(alias="hostPath")
    mount_path: str = Field(alias="mountPath")
    read_only: bool = Field(False, alias="readOnly")
    default: bool = False
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    @field_validator("host_path", "mount_path")
    @classmethod
    def _paths(cls, value: str) -> str:
        return _absolute(value)

    def allows(self, user: str, groups: Iterable[str] = ()) -> bool:
        """Whether ``user`` (a member of ``groups``) may use it: open to all when it names nobody."""
        if not self.users and not self.groups:
            return True
        return user in self.users or any(g in self.groups for g in groups)


class StorageConfigs(BaseModel):
    """The operator's storages, by name."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    storages: tuple[StorageConfig, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> StorageConfigs:
        names = [s.name for s in self.storages]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"storage names must be unique: {', '.join(twice)}")
        return self

    def get(self, name: str) -> StorageConfig | None:
        return next((s for s in self.storages if s.name == name), None)

    def usable_by(self, user: str, groups: Iterable[str] = ()) -> tuple[StorageConfig, ...]:
        members = tuple(groups)
        return tuple(s for s in self.storages if s.allows(user, members))


NO_STORAGES = StorageConfigs()


def parse_storage_configs(text: str, path: str = "<text>") -> StorageConfigs:
    """The storages of a YAML or JSON document (a mapping with ``storages``, or a bare list)."""
    try:
        data: Any = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as e:
        raise StorageConfigError(path, f"not YAML or JSON: {e}") from e
    if isinstance(data, list):
        data = {"storages": data}
    try:
        return StorageConfigs.model_validate(data or {})
    except ValidationError as e:
        raise StorageConfigError(path, json.dumps(e.errors(include_url=False, include_input=False),
                                                  default=str)) from e


def load_storage_configs(path: str | None) -> StorageConfigs:
    """The storages in the file ``PAIQ_STORAGE_CONFIG`` names (none when unset)."""
    if not path:
        return NO_STORAGES
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise StorageConfigError(path, f"cannot be read: {e.strerror}") from e
    return parse_storage_configs(text, path)


def requested_storages(parameters: Mapping[str, Any] | None) -> tuple[str, ...] | None:
    """The storage names a ``teamwise_storage`` plugin's parameters ask for (``None``: the defaults)."""
    names = (parameters or {}).get("storageConfigNames")
    if not isinstance(names, Sequence) or isinstance(names, str):
        return None
    return tuple(str(n) for n in names)


def storages_for(configs: StorageConfigs, names: tuple[str, ...] | None, user: str,
                 groups: Iterable[str] = ()) -> tuple[StorageConfig, ...]:
    """What a task mounts: the named storages (unknown ones skipped: refused at submit), or the defaults the
    user may use."""
    if names is None:
        return tuple(s for s in configs.usable_by(user, groups) if s.default)
    found = (configs.get(n) for n in names)
    return tuple(s for s in found if s is not None)


@dataclass(frozen=True)
class StorageDenied:
    """Why a submission may not have a storage: it does not exist (400) or is not the user's (403)."""

    storage: str
    unknown: bool
    message: str

    def __str__(self) -> str:
        return self.message


def storage_refusal(configs: StorageConfigs, names: tuple[str, ...] | None, user: str,
                    groups: Iterable[str] = ()) -> StorageDenied | None:
    """Why ``user`` may not have these storages (an unknown name, or one not theirs); ``None``: they may."""
    members = tuple(groups)
    for name in names or ():
        config = configs.get(name)
        if config is None:
            return StorageDenied(name, True, f"storage {name} does not exist (teamwise_storage's storageConfigNames)")
        if not config.allows(user, members):
            return StorageDenied(name, False, f"user {user} is not allowed to use storage {name}")
    return None


@functools.lru_cache(maxsize=4)
def storage_configs_at(path: str | None) -> StorageConfigs:
    """:func:`load_storage_configs`, read once per path for the process's life (the submit service's check)."""
    return load_storage_configs(path)
