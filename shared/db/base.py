"""The store's collections and what every part of it uses: sessions and whether the server takes
transactions, leases, and a job's key. The base of :class:`shared.db.jobreads.JobReads` and so of
:class:`shared.db.store.Store`; the store's helpers (:mod:`shared.db.indexes`, :mod:`shared.db.submission`)
are typed against it, below the store that calls them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import structlog
from pymongo import AsyncMongoClient, ReturnDocument
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError

from shared.db.expiry import Expiring, ExpiryPurger
from shared.db.idempotency import KEEP_SECONDS
from shared.db.journal import Journal
from shared.db.lists.counts import ListCounts
from shared.db.notifications import NotificationStore
from shared.db.profiles import ProfileStore
from shared.db.retry import idempotent
from shared.db.tallies import Tallies
from shared.db.usage import UsageStore
from shared.records import now_ms
from shared.tasks.jobkeys import StoredJobKey

Doc = dict[str, Any]
log = structlog.get_logger("paiq.store")


class StoreBase:
    """The collections (handles: nothing is read at construction) and the primitives over them."""

    def __init__(self, client: AsyncMongoClient[Doc], database: str) -> None:
        self._client = client
        db = client[database]
        self.jobs: AsyncCollection[Doc] = db["jobs"]
        self.job_configs: AsyncCollection[Doc] = db["job_configs"]  # big jobs' configs (JobRecord.documents)
        self.nodes: AsyncCollection[Doc] = db["nodes"]
        self.users: AsyncCollection[Doc] = db["users"]
        self.vcs: AsyncCollection[Doc] = db["virtual_clusters"]
        self.leases: AsyncCollection[Doc] = db["leases"]
        self.tokens: AsyncCollection[Doc] = db["tokens"]
        self.attempts: AsyncCollection[Doc] = db["job_attempts"]
        self.meta: AsyncCollection[Doc] = db["meta"]
        self.job_keys: AsyncCollection[Doc] = db["job_keys"]  # shared.tasks.jobkeys: never in a job document
        self.idempotency: AsyncCollection[Doc] = db["idempotency"]  # submissions by Idempotency-Key, a day
        self.tallies = Tallies(db)
        self.list_counts = ListCounts(db)  # ended jobs by creation time, for deep pages (shared.db.lists.counts)
        self.profiles = ProfileStore(db)  # tasks' usage series (the launchers write, the API reads)
        self.notifications = NotificationStore(db)  # subscriptions and deliveries (shared.db.notifications)
        self.usage = UsageStore(db, self.profiles)  # daily usage per VC and user, counted as jobs end
        self.journal = Journal(db)  # every job and task event, stored with its change (shared.db.journal)
        # sessions and idempotency records, removed a window at a time once expired (shared.db.expiry)
        self.expiring = ExpiryPurger(db, [Expiring(self.tokens, "expires_at"),
                                          Expiring(self.idempotency, "created_at", timedelta(seconds=KEEP_SECONDS))])
        self._transactions: bool | None = None
        # why the database can answer no more (its embedded server exited): a shutdown then makes none of the
        # calls it would make to hand things over, each of which would wait out its deadline
        self.gone: str | None = None

    def start_session(self) -> AsyncClientSession:
        """A session of the store's client, for a transaction."""
        return self._client.start_session()

    @property
    def transactions_known(self) -> bool | None:
        """Whether the server takes transactions, as far as asked already (None: not asked yet)."""
        return self._transactions

    async def supports_transactions(self) -> bool:
        """Whether the server is a replica set member (mongod's condition for transactions); asked once."""
        if self._transactions is None:
            hello = await self._client.admin.command("hello")
            self._transactions = bool(hello.get("setName")) or hello.get("msg") == "isdbgrid"
            if not self._transactions:
                log.warning("the MongoDB server is not a replica set: scheduler commits are not fenced by "
                            "its lease (run mongod as a replica set, even of one member)")
        return self._transactions

    async def put_job_key(self, key: StoredJobKey) -> None:
        await idempotent(lambda: self.job_keys.replace_one({"_id": key.job_id}, key.to_document(), upsert=True),
                         "store a job's key")

    # --- leases ------------------------------------------------------------------------------

    async def hold_lease(self, name: str, holder: str, ttl_ms: int) -> bool:
        """Take or renew the lease ``name`` for ``holder``; False while someone else holds it."""
        now = now_ms()
        try:
            doc = await self.leases.find_one_and_update(
                {"_id": name, "$or": [{"holder": holder}, {"expires_ms": {"$lt": now}}]},
                {"$set": {"holder": holder, "expires_ms": now + ttl_ms}}, upsert=True,
                return_document=ReturnDocument.AFTER)
        except DuplicateKeyError:
            return False  # held by another: the upsert tried to create a second one
        return doc is not None and doc.get("holder") == holder

    async def release_lease(self, name: str, holder: str) -> None:
        """Give the lease up (nothing when the database is gone: the lease runs out by itself)."""
        if self.gone is None:
            await self.leases.delete_one({"_id": name, "holder": holder})

