"""How many finished jobs each virtual cluster holds, per state: counters kept up as jobs end and as
they are removed, so that no request and no periodic pass counts the history.

Collection ``job_tallies``: one document per (virtual cluster, final state),
``{_id: "<vc>|<state>", vc, state, n, added: [...], removed: [...]}``. Counting is idempotent: the
job's id goes into a bounded list of recent ids in the same atomic update that moves ``n``, and the
update's filter refuses an id already there (the filter misses, the upsert then collides with the
existing ``_id``), so a count retried after a crash changes nothing. Active jobs are not tallied:
they are few and counted from the state index when asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

Doc = dict[str, Any]
RECENT_IDS = 1000  # ids remembered per counter: a retry comes within seconds, long before 1,000 others


class Tallies:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self.col = db["job_tallies"]

    async def add(self, vc: str, state: str, job_id: str) -> None:
        """Count ``job_id`` as ended in ``state`` (once, however often it is called)."""
        await self._move(vc, state, job_id, 1, "added")

    async def remove(self, vc: str, state: str, job_id: str) -> None:
        """Stop counting ``job_id`` (its record is being deleted; once, however often it is called)."""
        await self._move(vc, state, job_id, -1, "removed")

    async def add_in(self, vc: str, state: str, job_id: str, session: AsyncClientSession | None) -> None:
        """:meth:`add` in ``session``'s transaction (the one that marks the job counted). A miss (no counter yet,
        or this id counted already) is told apart by a read: the upsert's collision would end the transaction."""
        moved = await self.col.update_one({"_id": f"{vc}|{state}", "added": {"$ne": job_id}},
                                          _moving(vc, state, job_id, 1, "added"), session=session)
        if moved.matched_count == 0 and await self.col.find_one({"_id": f"{vc}|{state}"}, {"_id": 1},
                                                                session=session) is None:
            await self.col.insert_one({"_id": f"{vc}|{state}", "vc": vc, "state": state, "n": 1, "added": [job_id]},
                                      session=session)

    async def _move(self, vc: str, state: str, job_id: str, delta: int, seen: str) -> None:
        try:
            await self.col.update_one({"_id": f"{vc}|{state}", seen: {"$ne": job_id}},
                                      _moving(vc, state, job_id, delta, seen), upsert=True)
        except DuplicateKeyError:
            return  # counted already: this is a retry

    async def add_counts(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Add whole counts at once (a bulk import of finished jobs, the schema migration)."""
        for (vc, state), n in counts.items():
            await self.col.update_one({"_id": f"{vc}|{state}"}, {"$inc": {"n": n}, "$set": {"vc": vc, "state": state}},
                                      upsert=True)

    async def set_counts(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Replace every counter (the schema migration, which has just counted the whole history)."""
        await self.col.delete_many({})
        for (vc, state), n in counts.items():
            await self.col.insert_one({"_id": f"{vc}|{state}", "vc": vc, "state": state, "n": n})

    async def by_vc(self) -> dict[str, dict[str, int]]:
        """``{vc: {state: n}}`` for the final states (one small document per VC and state)."""
        out: dict[str, dict[str, int]] = {}
        async for d in self.col.find({}, {"vc": 1, "state": 1, "n": 1}):
            out.setdefault(str(d["vc"]), {})[str(d["state"])] = int(d.get("n", 0))
        return out


def _moving(vc: str, state: str, job_id: str, delta: int, seen: str) -> Doc:
    """The update that moves a counter by ``delta`` and remembers ``job_id`` among the recent ``seen`` ids."""
    return {"$inc": {"n": delta}, "$set": {"vc": vc, "state": state},
            "$push": {seen: {"$each": [job_id], "$slice": -RECENT_IDS}}}
