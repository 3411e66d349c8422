"""Everything stored sealed under the first key of ``PAIQ_SECRETS_KEY``: a pass at the submit service's start.

It makes two things true (issue 35, :mod:`shared.jobconfig.sealing`):

- the SSH private keys an earlier paiq stored in clear (``job_keys.private_key``) are sealed;
- after a key rotation (the new key put first in ``PAIQ_SECRETS_KEY``, the old one kept after it), what is
  sealed and still needed is sealed again under the new first key, so that the old one can be dropped: every
  job key, the secrets and registry credentials of every job that has not ended, every webhook's signing key.

``meta``'s document ``sealing`` records the fingerprint of the first key that everything was sealed under when
the last pass ended (a digest, never the key): a start whose first key has that fingerprint reads that one
document and nothing else. Otherwise one service (the lease ``sealing``) walks ``job_keys`` by id, then the
jobs that have not ended, then the webhooks, ``CHUNK`` documents at a time (each chunk's writes in one bulk
write, each write matching the document only as it was read), and records after each chunk where it got to
(``pass``: the fingerprint it seals under, the last ids done, the counts): a pass cut off is resumed there by
the next start. The schema migration does not do it: it may run in a service that has no key. Other starts
meanwhile go on without waiting: a reader opens either form, with any key of ``PAIQ_SECRETS_KEY``.

Ended jobs' secrets are left as they are: nothing opens them again (a task starts only for a job that has not
ended), and once the old key is dropped nobody can, which is what dropping it is for.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from pymongo import ASCENDING, UpdateOne

from shared.jobconfig.model import JobConfig
from shared.jobconfig.sealing import SETTING, SealingError, key_fingerprint, needs_key, reseal_config, reseal_text
from shared.packing import configs_whole, unpack
from shared.records import ACTIVE_JOB_STATES, CONFIGS_APART, PACKED_CONFIG, apart_configs, config_fields
from shared.tasks.jobkeys import CLEAR_FIELD, resealed

if TYPE_CHECKING:
    from shared.db.store import Store

log = structlog.get_logger("paiq.store")

META_ID = "sealing"  # meta's document: the fingerprint everything is sealed under, and a pass's progress
LEASE = "sealing"
LEASE_MS = 60_000
NAMED = 10  # of the values no key opens, how many the log line names
CHUNK = 200  # documents read, sealed again and written at a time (a job's whole configs: up to ~3 MB each)
Doc = dict[str, Any]


@dataclass
class Progress:
    """Where a pass got to, as ``meta`` keeps it between chunks (and across a restart)."""

    to: str  # the fingerprint of the first key it seals under
    keys_after: str = ""  # the last job_keys id done
    jobs_after: str = ""  # the last job id done
    hooks_after: str = ""  # the last webhook id done
    keys: int = 0
    clear_keys: int = 0
    jobs: int = 0
    hooks: int = 0
    unopened: list[str] = field(default_factory=list)  # the first of what no key of PAIQ_SECRETS_KEY opens
    unopened_count: int = 0  # all of them (left as they are)

    def cannot_open(self, what: str) -> None:
        self.unopened_count += 1
        if len(self.unopened) < NAMED:
            self.unopened.append(what)

    @classmethod
    def resumed(cls, doc: Any, fingerprint: str) -> Progress:
        """The pass recorded in ``meta`` when it seals under the same key, else a new one."""
        if isinstance(doc, dict) and doc.get("to") == fingerprint:
            return cls(**{k: v for k, v in doc.items() if k in cls.__dataclass_fields__})
        return cls(to=fingerprint)


@dataclass(frozen=True)
class Sealed:
    """What a finished pass did."""

    previous: str | None  # the fingerprint recorded before (None: no pass had finished)
    progress: Progress

    @property
    def rotated(self) -> bool:
        return self.previous is not None

    def sentence(self) -> str:
        """The one line an operator reads."""
        p = self.progress
        what = (f"{p.keys} job keys ({p.clear_keys} of them stored in clear by an earlier paiq), {p.jobs} jobs' "
                f"secrets and {p.hooks} webhooks' signing keys")
        if self.rotated:
            line = f"re-sealed {what} under the new first key of {SETTING}; the old key may now be removed"
        else:
            line = f"sealed {what} under the first key of {SETTING}; nothing stored is in clear"
        if p.unopened_count:
            line += (f"; {p.unopened_count} could not be opened with any key of {SETTING} and were left as they "
                     f"are (sealed with a key since removed): {', '.join(p.unopened)}"
                     f"{', ...' if p.unopened_count > len(p.unopened) else ''}")
        return line


async def seal_stored(store: Store, secrets_key: str, holder: str) -> Sealed | None:
    """Seal what is stored under the first key of ``secrets_key`` unless ``meta`` says it is (one read);
    None when there was nothing to do or another service holds the pass."""
    fingerprint = key_fingerprint(secrets_key)
    meta = await store.meta.find_one({"_id": META_ID})
    if meta is not None and meta.get("fingerprint") == fingerprint:
        return None
    if not await store.hold_lease(LEASE, holder, LEASE_MS):
        log.info("another service is sealing the stored credentials under the first key of PAIQ_SECRETS_KEY; "
                 "going on meanwhile")
        return None
    try:
        meta = await store.meta.find_one({"_id": META_ID}) or {}
        if meta.get("fingerprint") == fingerprint:  # another finished it just before
            return None
        previous = meta.get("fingerprint")
        progress = Progress.resumed(meta.get("pass"), fingerprint)
        log.info("sealing the stored credentials under the first key of PAIQ_SECRETS_KEY (job keys, active jobs' "
                 "secrets, webhooks' signing keys); the API starts after it", fingerprint=fingerprint,
                 previous=previous, resumed=progress != Progress(to=fingerprint))
        walk = _Walk(store, secrets_key, holder, progress)
        if not (await walk.keys() and await walk.jobs() and await walk.hooks()):
            return None
        await store.meta.update_one({"_id": META_ID}, {"$set": {"fingerprint": fingerprint}, "$unset": {"pass": ""}},
                                    upsert=True)
    finally:
        await store.release_lease(LEASE, holder)
    sealed = Sealed(previous=str(previous) if previous else None, progress=progress)
    said = log.warning if sealed.rotated or progress.keys or progress.jobs or progress.unopened_count else log.info
    said(sealed.sentence(), keys=progress.keys, clear_keys=progress.clear_keys, jobs=progress.jobs,
         hooks=progress.hooks, fingerprint=fingerprint, previous=previous)
    return sealed


async def clear_keys_left(store: Store) -> bool:
    """Whether a job key may still be stored in clear (a service without PAIQ_SECRETS_KEY asks, to say so):
    none once a pass has finished (every writer since seals, or stores no key); else the collection is read
    up to the first clear one (at such a start only)."""
    meta = await store.meta.find_one({"_id": META_ID})
    if meta is not None and meta.get("fingerprint"):
        return False
    return await store.job_keys.find_one({CLEAR_FIELD: {"$exists": True}}, {"_id": 1}) is not None


class _Walk:
    """One pass's chunks, each recorded in ``meta`` and each renewing the lease."""

    def __init__(self, store: Store, key: str, holder: str, progress: Progress) -> None:
        self.store, self.key, self.holder, self.progress = store, key, holder, progress

    async def _recorded(self) -> bool:
        """The chunk's progress recorded; False when the lease was lost (another resumes the pass)."""
        await self.store.meta.update_one({"_id": META_ID}, {"$set": {"pass": self.progress.__dict__}}, upsert=True)
        if await self.store.hold_lease(LEASE, self.holder, LEASE_MS):
            return True
        log.warning("the sealing pass lost its lease; the service holding it now finishes the pass")
        return False

    async def keys(self) -> bool:
        p = self.progress
        while docs := await self._next(self.store.job_keys.find, p.keys_after):
            ops = []
            for doc in docs:
                try:
                    write = resealed(doc, self.key)
                except SealingError:
                    p.cannot_open(f"the SSH key of job {doc['_id']}")
                    continue
                if write is not None:
                    ops.append(UpdateOne(*write))
                    p.clear_keys += CLEAR_FIELD in doc
            if ops:
                p.keys += (await self.store.job_keys.bulk_write(ops, ordered=False)).modified_count
            p.keys_after = str(docs[-1]["_id"])
            if not await self._recorded():
                return False
        return True

    async def jobs(self) -> bool:
        """The jobs that have not ended (the state index; their ids first, then their configs by chunk)."""
        p = self.progress
        query = {"state": {"$in": list(ACTIVE_JOB_STATES)}}
        ids = sorted(i for i in [str(d["_id"]) async for d in self.store.jobs.find(query, {"_id": 1})]
                     if i > p.jobs_after)
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start:start + CHUNK]
            jobs: list[UpdateOne] = []
            configs: list[UpdateOne] = []
            for job_id, doc, apart in await self._configs(chunk):
                try:
                    write = resealed_configs(doc, self.key, apart=apart)
                except SealingError:
                    p.cannot_open(f"the secrets of job {job_id}")
                    continue
                if write is not None:
                    (configs if apart else jobs).append(UpdateOne({"_id": job_id}, write))
            for collection, ops in ((self.store.jobs, jobs), (self.store.job_configs, configs)):
                if ops:
                    p.jobs += (await collection.bulk_write(ops, ordered=False)).modified_count
            p.jobs_after = chunk[-1]
            if not await self._recorded():
                return False
        return True

    async def hooks(self) -> bool:
        p = self.progress
        subscriptions = self.store.notifications.subscriptions
        while docs := await self._next(subscriptions.find, p.hooks_after):
            ops = []
            for doc in docs:
                token = str(doc.get("sealed_secret") or "")
                if not token:
                    continue
                try:
                    new = reseal_text(token, self.key, "webhook signing key")
                except SealingError:
                    p.cannot_open(f"the signing key of webhook {doc['_id']}")
                    continue
                ops.append(UpdateOne({"_id": doc["_id"], "sealed_secret": token}, {"$set": {"sealed_secret": new}}))
            if ops:
                p.hooks += (await subscriptions.bulk_write(ops, ordered=False)).modified_count
            p.hooks_after = str(docs[-1]["_id"])
            if not await self._recorded():
                return False
        return True

    @staticmethod
    async def _next(find: Callable[..., Any], after: str) -> list[Doc]:
        cursor = find({"_id": {"$gt": after}}).sort([("_id", ASCENDING)]).limit(CHUNK)
        return [d async for d in cursor]

    async def _configs(self, ids: list[str]) -> list[tuple[str, Doc, bool]]:
        """Each job's configs' fields as stored (the job's own, or its configs' document), without its tasks."""
        fields = {"config": 1, "raw_config": 1, PACKED_CONFIG: 1, CONFIGS_APART: 1}
        docs = [d async for d in self.store.jobs.find({"_id": {"$in": ids}}, fields)]
        apart_ids = [d["_id"] for d in docs if d.get(CONFIGS_APART)]
        apart = ({c["_id"]: c async for c in self.store.job_configs.find({"_id": {"$in": apart_ids}})}
                 if apart_ids else {})
        found = []
        for doc in docs:
            if not doc.get(CONFIGS_APART):
                found.append((str(doc["_id"]), doc, False))
            elif (configs := apart.get(doc["_id"])) is not None:
                found.append((str(doc["_id"]), configs, True))
        return found


def resealed_configs(doc: Doc, key: str, *, apart: bool) -> Doc | None:
    """The update that seals a job's stored configs again (``doc``: the job's fields, or its configs'
    document when ``apart``), or None when they hold nothing sealed. Pure."""
    plain = configs_whole(json.loads(unpack(doc[PACKED_CONFIG]))) if doc.get(PACKED_CONFIG) else doc
    config = JobConfig.model_validate(plain["config"])
    if not needs_key(config):
        return None
    new, raw = reseal_config(config, key), plain["raw_config"]
    if apart:
        written = apart_configs(new, raw) or {"config": new.model_dump(mode="json", by_alias=True), "raw_config": raw}
    else:
        written = config_fields(new, raw)
    others = ("config", "raw_config", PACKED_CONFIG) if apart else ("raw_config", PACKED_CONFIG)
    return {"$set": written, **({"$unset": unset} if (unset := {f: "" for f in others if f not in written}) else {})}
