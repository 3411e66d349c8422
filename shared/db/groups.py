"""Groups (OpenPAI v1.8's ``/api/v2/groups``): one small document per group, by name.

A group's members are not kept here: as in OpenPAI, they are the users whose ``groups`` (OpenPAI's
``grouplist``) name it, found by the ``users_by_group`` index. Which virtual clusters a group may use is
the virtual clusters' own ``groups`` (:meth:`shared.scheduling.vclusters.VirtualCluster.admits`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict
from pymongo import ASCENDING
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from shared.db.retry import idempotent
from shared.db.store import Store

GROUP_PATTERN = re.compile(r"[A-Za-z0-9_]{1,64}")  # OpenPAI v1.8's /^[A-Za-z0-9_]+$/, bounded
MAX_GROUPS = 10_000  # the list's bound: groups are an operator's few, never grown by jobs


class Group(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    description: str = ""
    external_name: str = ""
    extension: dict[str, Any] = {}


def _group(doc: dict[str, Any]) -> Group:
    text = doc.get("extension_json")
    ext = json.loads(text) if isinstance(text, str) else {}
    return Group(name=str(doc["_id"]), description=str(doc.get("description") or ""),
                 external_name=str(doc.get("external_name") or ""), extension=ext if isinstance(ext, dict) else {})


def _fields(group: Group) -> dict[str, Any]:
    """A group's stored fields; its extension as JSON text, so that any key a client sends is stored as sent."""
    return {"description": group.description, "external_name": group.external_name,
            "extension_json": json.dumps(group.extension)}


class Groups:
    def __init__(self, store: Store) -> None:
        self._groups: AsyncCollection[dict[str, Any]] = store.users.database["groups"]

    async def create(self, group: Group) -> bool:
        """False when a group of that name exists."""
        doc = {"_id": group.name, **_fields(group)}

        async def insert() -> bool:
            try:
                await self._groups.insert_one(doc)
            except DuplicateKeyError:  # someone's, or this request's own try that a restart cut off
                stored = await self._groups.find_one({"_id": group.name})
                return stored == doc
            return True

        return await idempotent(insert, "create a group")

    async def replace(self, group: Group) -> bool:
        """False when there is no such group."""
        result = await idempotent(lambda: self._groups.replace_one({"_id": group.name}, _fields(group)),
                                  "update a group")
        return int(result.matched_count) > 0

    async def get(self, name: str) -> Group | None:
        doc = await self._groups.find_one({"_id": name})
        return _group(doc) if doc is not None else None

    async def list_all(self) -> list[Group]:
        return [_group(d) async for d in self._groups.find({}).sort([("_id", ASCENDING)]).limit(MAX_GROUPS)]

    async def existing(self, names: list[str]) -> set[str]:
        return {str(d["_id"]) async for d in self._groups.find({"_id": {"$in": names}}, {"_id": 1})}

    async def delete(self, name: str) -> bool:
        result = await idempotent(lambda: self._groups.delete_one({"_id": name}), "delete a group")
        return int(result.deleted_count) > 0
