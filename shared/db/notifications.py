"""Where notifications are kept: subscriptions, deliveries, rate counters and the changes already handled.

- ``notify_subscriptions``: a user's (or, owner ``""``, the platform's) subscriptions, read by owner
  (``owner`` index) and by ``_id``; a user has at most ``MAX_SUBSCRIPTIONS``.
- ``notify_deliveries``: one document per message to one recipient about one change, ``_id`` the
  delivery's id (:func:`shared.notify.decide.delivery_id`): written ``pending`` before anything is sent, so a
  change handled twice (a redelivered event) finds it and sends nothing again. A try holds it by a lease: a
  new delivery is written already leased to the process that wrote it (due for the others only once that
  lease ends, so its first try costs no claim), a retry is claimed when due; a notifier killed mid-try
  leaves it to be tried again once the lease ends, with the same id as its idempotency key. Then it is
  ``sent``, ``pending`` again later (retry), ``failed``, or ``held`` for a digest and ``digested`` once that
  went. Due tries are read from a partial index of the pending ones only; a user's list, and a digest's
  held ones (its owner's in its window), from ``(owner, created_ms)``; every document expires
  (``expires_at``: paiq removes what expired, a window at a time, :mod:`shared.db.expiry`), so nothing grows
  with history.
- ``notify_rates``: one counter per (user, recipient, window), expiring with its window.
- ``notify_changes``: the changes whose deliveries are all written (so the next event of the same change,
  such as every other task's ``task.started``, costs one read by ``_id``), expiring like deliveries.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError, DuplicateKeyError

from shared.db.expiry import Expiring, ExpiryPurger
from shared.db.retry import idempotent
from shared.notify.decide import JobFacts
from shared.notify.subscriptions import Subscription
from shared.records import CONFIGS_APART, PACKED_CONFIG

Doc = dict[str, Any]


class DeliveryState:
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"
    HELD = "held"  # past the rate limit: waits for its digest
    DIGESTED = "digested"


def expiry(at_ms: int) -> datetime:
    return datetime.fromtimestamp(at_ms / 1000, UTC)


class NotificationStore:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self.subscriptions: AsyncCollection[Doc] = db["notify_subscriptions"]
        self.deliveries: AsyncCollection[Doc] = db["notify_deliveries"]
        self.rates: AsyncCollection[Doc] = db["notify_rates"]
        self.changes: AsyncCollection[Doc] = db["notify_changes"]
        self.users: AsyncCollection[Doc] = db["users"]
        self.jobs: AsyncCollection[Doc] = db["jobs"]
        self.expiring = ExpiryPurger(db, [Expiring(col, "expires_at") for col in (self.deliveries, self.rates,
                                                                                   self.changes)])

    async def ensure_indexes(self) -> None:
        # a user's subscriptions (and the platform's: owner "")
        await self.subscriptions.create_index([("owner", ASCENDING)], name="subscriptions_by_owner")
        # the tries due: pending deliveries only, by when
        await self.deliveries.create_index([("next_ms", ASCENDING)], name="deliveries_due",
                                           partialFilterExpression={"state": DeliveryState.PENDING})
        # a user's recent deliveries, newest first
        await self.deliveries.create_index([("owner", ASCENDING), ("created_ms", DESCENDING)],
                                           name="deliveries_by_owner")
        # (a digest's held deliveries are read by the index above: its owner's in its window; an index of their
        # own cost every delivery written or marked a share of the database's time, tests/benchmarks/notify.py)
        if "deliveries_held" in await self.deliveries.index_information():
            await self.deliveries.drop_index("deliveries_held")
        await self.expiring.ensure_indexes()  # nothing outlives its expiry (shared.db.expiry)

    # --- subscriptions ------------------------------------------------------------------------------

    async def subscriptions_of(self, owner: str) -> list[Subscription]:
        return [_subscription(d) async for d in self.subscriptions.find({"owner": owner})]

    async def subscriptions_of_many(self, owners: list[str]) -> dict[str, list[Subscription]]:
        """Several owners' subscriptions in one query (a burst of changes of many users' jobs)."""
        found: dict[str, list[Subscription]] = {owner: [] for owner in owners}
        async for doc in self.subscriptions.find({"owner": {"$in": owners}}):
            found.setdefault(doc["owner"], []).append(_subscription(doc))
        return found

    async def subscriptions_by_id(self, sub_ids: list[str]) -> dict[str, Subscription]:
        return {d["_id"]: _subscription(d) async for d in self.subscriptions.find({"_id": {"$in": sub_ids}})}

    async def user_emails(self, users: list[str]) -> dict[str, str]:
        """Several users' addresses in one query ("" for none)."""
        return {d["_id"]: str(d.get("email") or "") async for d in self.users.find({"_id": {"$in": users}},
                                                                                  {"email": 1})}

    async def subscription(self, sub_id: str) -> Subscription | None:
        doc = await self.subscriptions.find_one({"_id": sub_id})
        return None if doc is None else _subscription(doc)

    async def add_subscription(self, sub: Subscription) -> None:
        doc = {"_id": sub.id, **sub.model_dump(mode="json", exclude={"id"})}
        await idempotent(lambda: self.subscriptions.replace_one({"_id": sub.id}, doc, upsert=True),
                         "store a subscription")

    async def delete_subscription(self, owner: str, sub_id: str) -> bool:
        result = await idempotent(lambda: self.subscriptions.delete_one({"_id": sub_id, "owner": owner}),
                                  "delete a subscription")
        return result.deleted_count > 0

    async def user_email(self, user: str) -> str:
        doc = await self.users.find_one({"_id": user}, {"email": 1})
        return str(doc.get("email") or "") if doc else ""

    # --- jobs' facts ---------------------------------------------------------------------------------

    async def job_facts(self, job_ids: list[str]) -> dict[str, Doc]:
        """The fields of several jobs a message needs (:data:`JOB_FACTS`), in one query by ``_id``: a burst's
        jobs read without their configs and tasks, which a message does not say. A job whose configs are
        packed or apart has ``packed_config`` or ``configs_apart`` in what is returned (its switch is not in
        plain sight: the caller reads that job whole)."""
        return {d["_id"]: d async for d in self.jobs.find({"_id": {"$in": job_ids}}, JOB_FACTS)}

    # --- changes handled ----------------------------------------------------------------------------

    async def change_handled(self, key: str) -> bool:
        return await self.changes.find_one({"_id": key}, {"_id": 1}) is not None

    async def mark_change(self, key: str, expires_ms: int) -> None:
        await idempotent(lambda: self.changes.replace_one({"_id": key}, {"expires_at": expiry(expires_ms)},
                                                          upsert=True), "mark a change handled")

    # --- deliveries ---------------------------------------------------------------------------------

    async def insert_delivery(self, doc: Doc) -> bool:
        """Store a new delivery; False when it was stored already (the change was handled before)."""
        try:
            await self.deliveries.insert_one(doc)
        except DuplicateKeyError:
            return False
        return True

    async def insert_deliveries(self, docs: list[Doc]) -> list[bool]:
        """Store new deliveries in one write; for each, False when it was stored already (a handled change)."""
        try:
            await self.deliveries.insert_many(docs, ordered=False)
        except BulkWriteError as e:
            errors = e.details.get("writeErrors", [])
            if any(err.get("code") != DUPLICATE_KEY for err in errors):
                raise
            stored_before = {int(err["index"]) for err in errors}
            return [i not in stored_before for i in range(len(docs))]
        return [True] * len(docs)

    async def delivery(self, delivery_id: str) -> Doc | None:
        return await self.deliveries.find_one({"_id": delivery_id})

    async def due(self, now_ms: int, limit: int) -> list[Doc]:
        """Pending deliveries whose try is due, soonest first (their bodies left out)."""
        cursor = self.deliveries.find({"state": DeliveryState.PENDING, "next_ms": {"$lte": now_ms}},
                                      {"_id": 1, "channel": 1, "target": 1, "owner": 1, "next_ms": 1, "lease_ms": 1})
        return [d async for d in cursor.sort([("next_ms", ASCENDING)]).limit(limit)]

    async def claim(self, delivery_id: str, now_ms: int, lease_ms: int, token: str) -> Doc | None:
        """Take a pending delivery for one try (no other process holds it); the delivery, or None."""
        return await self.deliveries.find_one_and_update(
            {"_id": delivery_id, "state": DeliveryState.PENDING, "lease_ms": {"$lt": now_ms}},
            {"$set": {"lease_ms": now_ms + lease_ms, "lease_token": token}}, return_document=ReturnDocument.AFTER)

    async def extend(self, delivery_id: str, now_ms: int, lease_ms: int, token: str) -> bool:
        """Renew this process's lease of a delivery it wrote leased; False if another process took it meanwhile."""
        result = await self.deliveries.update_one(
            {"_id": delivery_id, "state": DeliveryState.PENDING, "lease_token": token},
            {"$set": {"lease_ms": now_ms + lease_ms}})
        return result.modified_count > 0

    async def finish(self, delivery_id: str, token: str, changes: Doc) -> bool:
        """Record a try's outcome (``changes``), if this try still holds the delivery."""
        result = await idempotent(lambda: self.deliveries.update_one(
            {"_id": delivery_id, "state": DeliveryState.PENDING, "lease_token": token},
            {"$set": {**changes, "lease_ms": 0, "lease_token": ""}, "$inc": {"tries": 1}}), "record a delivery")
        return result.modified_count > 0

    async def finish_many(self, tries: list[tuple[str, str, Doc]], now_ms: int) -> list[bool]:
        """Record many tries' outcomes: (delivery id, the try's lease token, its ``changes``); for each, whether
        the try still held its delivery. Tries with the same changes (the sent ones: ``sent_ms`` is ``now_ms``
        for them all) are one ``update_many``, which costs this store half what as many single updates do;
        each such write leaves its own mark (``tried``), read back only when some did not hold theirs (another
        process took it over meanwhile)."""
        groups: dict[tuple[str, str], list[int]] = {}
        for i, (_, token, changes) in enumerate(tries):
            groups.setdefault((token, repr(sorted(changes.items()))), []).append(i)
        held = [False] * len(tries)
        for (token, _), members in groups.items():
            ids = [tries[i][0] for i in members]
            changes = tries[members[0]][2]
            marked = await self._finish_group(ids, token, changes, now_ms)
            for i in members:
                held[i] = tries[i][0] in marked
        return held

    async def _finish_group(self, ids: list[str], token: str, changes: Doc, now_ms: int) -> set[str]:
        """One update of tries with the same changes; the ids it updated (marked ``tried`` by it alone)."""
        mark = f"{token}/{uuid.uuid4().hex[:12]}"
        sent = {"sent_ms": now_ms} if changes.get("state") == DeliveryState.SENT else {}
        result = await idempotent(lambda: self.deliveries.update_many(
            {"_id": {"$in": ids}, "state": DeliveryState.PENDING, "lease_token": token},
            {"$set": {**changes, **sent, "lease_ms": 0, "lease_token": "", "tried": mark}, "$inc": {"tries": 1}}),
            "record deliveries")
        if result.modified_count == len(ids):
            return set(ids)
        return {d["_id"] async for d in self.deliveries.find({"_id": {"$in": ids}, "tried": mark}, {"_id": 1})}

    async def deliveries_of(self, owner: str, since_ms: int, limit: int, now_ms: int) -> list[Doc]:
        """The owner's newest ``limit`` deliveries since ``since_ms``: read back from now in windows (an hour, a
        day, then the rest), each one bounded range of the ``(owner, created_ms)`` index, until the page is full;
        so a page of recent deliveries reads about a page, however many the owner has."""
        found: list[Doc] = []
        upper = now_ms + 1
        for span in (3_600_000, 86_400_000, None):
            lower = since_ms if span is None else max(since_ms, now_ms - span)
            if lower >= upper:
                continue
            cursor = self.deliveries.find({"owner": owner, "created_ms": {"$gte": lower, "$lt": upper}},
                                          {"body": 0, "text": 0, "lease_token": 0})
            found += [d async for d in cursor.sort([("owner", ASCENDING), ("created_ms", DESCENDING)])
                      .limit(limit - len(found))]
            upper = lower
            if len(found) >= limit:
                break
        return found

    async def held(self, digest_id: str, owner: str, since_ms: int, until_ms: int) -> list[Doc]:
        """A digest's held deliveries: its owner's written in its rate window (``since_ms`` to ``until_ms``), a
        bounded range of the ``(owner, created_ms)`` index."""
        cursor = self.deliveries.find({"owner": owner, "created_ms": {"$gte": since_ms, "$lt": until_ms},
                                       "digest_id": digest_id, "state": DeliveryState.HELD}, {"_id": 1, "subject": 1})
        return [d async for d in cursor.sort([("owner", ASCENDING), ("created_ms", ASCENDING)])]

    async def mark_digested(self, ids: list[str], now_ms: int) -> None:
        if ids:
            await idempotent(lambda: self.deliveries.update_many(
                {"_id": {"$in": ids}, "state": DeliveryState.HELD},
                {"$set": {"state": DeliveryState.DIGESTED, "sent_ms": now_ms}}), "mark deliveries digested")

    # --- rate limits --------------------------------------------------------------------------------

    async def count_message(self, key: str, expires_ms: int) -> int:
        """One more message in a rate window (``key``); how many it has had, this one included: each of many
        counted at once gets its own number. Not an upsert: SecantusDB answers None to one of two upserts racing
        on a new key (its $inc applied), whose count read afterwards may include later ones, which held back
        messages within the limit. The window's first message inserts it; one that loses that race counts on."""
        while True:
            doc = await self.rates.find_one_and_update({"_id": key}, {"$inc": {"n": 1}},
                                                       return_document=ReturnDocument.AFTER)
            if doc is not None:
                return int(doc["n"])
            try:
                await self.rates.insert_one({"_id": key, "n": 1, "expires_at": expiry(expires_ms)})
                return 1
            except DuplicateKeyError:
                continue  # another message of the window inserted it meanwhile

    async def purge(self, now_ms: int) -> int:
        """Delete what has expired, a window at a time (shared.db.expiry); how many records went."""
        return await self.expiring.purge(now_ms)


DUPLICATE_KEY = 11000
SWITCH_FIELD = "config.extras.jobStatusChangeNotification"
# What a message says of its job, read by projection: JobFacts' fields as the job's document names them, its
# switch, and whether the config is not in plain sight (packed, or apart), the only case the job is read whole.
JOB_FACTS = {**{name: 1 for name in JobFacts.model_fields if name not in ("job_id", "switch")},
             SWITCH_FIELD: 1, PACKED_CONFIG: 1, CONFIGS_APART: 1}


def _subscription(doc: Doc) -> Subscription:
    return Subscription.model_validate({**{k: v for k, v in doc.items() if k != "_id"}, "id": doc["_id"]})
