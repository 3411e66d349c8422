"""Credentials at rest in the real MongoDB-wire server (issue 35): a job's SSH private key is stored sealed and
nowhere in clear; the key documents an earlier paiq wrote in clear are sealed by the submit service's start
(shared/db/resealing.py), in chunks, resumably, once; and a key rotation (a new key put first in
PAIQ_SECRETS_KEY) seals the job keys, the active jobs' secrets and the webhooks' signing keys again under it,
after which the new key alone opens everything still needed."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog
from bson import json_util
from pymongo import AsyncMongoClient

from services.submit.atrest import CLEAR_LEFT, NO_KEY, seal_at_rest
from services.submit.routes.ssh import new_job_key
from shared.db import resealing
from shared.db.resealing import META_ID, clear_keys_left, seal_stored
from shared.db.store import Store
from shared.db.submission import encoded_job
from shared.errors import StoreError
from shared.jobconfig.notifykinds import Kind
from shared.jobconfig.sealing import SealedValueError, key_fingerprint, new_key, open_secrets, seal_config
from shared.notify.signing import open_secret, seal_secret
from shared.notify.subscriptions import Channel, Subscription
from shared.records import JobState
from shared.tasks.jobkeys import CLEAR_FIELD, SEALED_FIELD, JobKey, StoredJobKey
from tests.infra import unique
from tests.unit.factories import make_job
from tests.unit.test_sealing import v2_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

A, B = new_key(), new_key()


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri)
    s = Store(client, unique("sealed_"))
    await s.ensure_indexes()
    yield s
    await client.close()


async def everything(store: Store) -> str:
    """Every document of every collection, as extended JSON."""
    db = store.jobs.database
    return "\n".join([json_util.dumps(d) for name in await db.list_collection_names() async for d in db[name].find()])


def body_lines(key: JobKey) -> list[str]:
    """The lines of the private key's base64 body (each as a stored PEM would hold it)."""
    return key.private_key.get_secret_value().strip().splitlines()[1:-1]


def job_named(name: str, *, state: JobState = JobState.RUNNING, secrets_key: str | None = None) -> Any:
    config = v2_config().model_copy(update={"job_name": name})
    return make_job(seal_config(config, secrets_key) if secrets_key else config.model_copy(
        update={"secrets": {}, "registry_auth": None,
                "task_roles": tuple(r.model_copy(update={"registry_auth": None}) for r in config.task_roles)}),
                    state=state)


async def clear_key(store: Store, name: str) -> JobKey:
    """A key document as an earlier paiq wrote it: the private key in clear."""
    key = new_job_key(make_job(job_named(name).config), ())
    doc = {**key.sealed(A).to_document(), CLEAR_FIELD: key.private_key.get_secret_value()}
    del doc[SEALED_FIELD]
    await store.job_keys.insert_one(doc)
    return key


async def test_a_stored_jobs_private_key_is_nowhere_in_clear_and_opens_with_the_key(store: Store) -> None:
    job = job_named(unique("keyed"))
    key = new_job_key(job, ())
    await store.submit_job(job, encoded_job(job), key.sealed(A))
    doc = await store.job_keys.find_one({"_id": job.id})
    assert doc is not None and set(doc) >= {SEALED_FIELD} and CLEAR_FIELD not in doc
    dump = await everything(store)
    assert job.id in dump and "PRIVATE KEY" not in dump
    assert not [line for line in body_lines(key) if line in dump]
    stored = await store.job_key(job.id)
    assert stored is not None and stored.opened(A) == key


async def test_a_job_submitted_without_a_key_is_stored_without_a_key_pair(store: Store) -> None:
    job = job_named(unique("keyless"))
    await store.submit_job(job, encoded_job(job), None)
    assert await store.get_job(job.id) is not None and await store.job_key(job.id) is None


async def test_keys_stored_in_clear_are_sealed_at_the_submit_start_once_and_resumably(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resealing, "CHUNK", 2)
    keys = [await clear_key(store, f"old{i}") for i in range(5)]
    assert await clear_keys_left(store)
    # a reader meets the old documents meanwhile: they open without a key
    first = await store.job_key(keys[0].job_id)
    assert first is not None and first.opened(None) == keys[0]

    # a start without the key says what it leaves in clear, and seals nothing
    with structlog.testing.capture_logs() as logs:
        assert await seal_at_rest(store, None) is None
    assert [line["event"] for line in logs] == [NO_KEY, CLEAR_LEFT]

    # a pass cut off after its second chunk (a process killed) ...
    real = resealing._Walk._recorded
    calls = 0

    async def cut_off(self: Any) -> bool:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise StoreError("killed")
        return await real(self)

    monkeypatch.setattr(resealing._Walk, "_recorded", cut_off)
    with pytest.raises(StoreError):
        await seal_stored(store, A, "first")
    monkeypatch.setattr(resealing._Walk, "_recorded", real)
    await store.release_lease(resealing.LEASE, "first")  # what its lease's expiry does
    meta = await store.meta.find_one({"_id": META_ID})
    assert meta is not None and "fingerprint" not in meta and meta["pass"]["keys_after"] == keys[1].job_id

    # ... is resumed by the next start, after where it got to
    with structlog.testing.capture_logs() as logs:
        done = await seal_at_rest(store, A)
    assert done is not None and not done.rotated
    # the chunk whose progress the killed pass did not record is sealed again (it was sealed, no longer clear)
    assert (done.progress.keys, done.progress.clear_keys) == (5, 3)
    assert logs[-1]["event"] == done.sentence() and logs[-1]["log_level"] == "warning"
    assert logs[-1]["event"].startswith("sealed 5 job keys (3 of them stored in clear by an earlier paiq)")
    dump = await everything(store)
    assert not [line for key in keys for line in body_lines(key) if line in dump]
    for key in keys:
        stored = await store.job_key(key.job_id)
        assert stored is not None and stored.clear_private_key is None and stored.opened(A) == key
    meta = await store.meta.find_one({"_id": META_ID})
    assert meta is not None and meta["fingerprint"] == key_fingerprint(A) and "pass" not in meta
    assert A not in json.dumps(meta, default=str)
    assert not await clear_keys_left(store)

    # later starts read meta and nothing else
    async def no_scan(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a start with the recorded key walked the collections")

    monkeypatch.setattr(resealing._Walk, "keys", no_scan)
    assert await seal_stored(store, A, "later") is None


async def test_a_rotation_seals_everything_still_needed_under_the_new_first_key(store: Store) -> None:
    active, ended = job_named(unique("active"), secrets_key=A), job_named(unique("ended"), secrets_key=A,
                                                                          state=JobState.SUCCEEDED)
    big = job_named(unique("big"), secrets_key=A)
    big = big.model_copy(update={"config": big.config.model_copy(update={"extras": {"n": uuid.uuid4().hex * 2000}})})
    keys = []
    for job in (active, ended, big):
        keys.append(new_job_key(job, ()))
        await store.submit_job(job, encoded_job(job), keys[-1].sealed(A))
    assert await store.job_configs.find_one({"_id": big.id}) is not None, "the big job's configs are apart"
    hook = Subscription(id=unique("hook"), owner="alice", channel=Channel.WEBHOOK, kinds=frozenset({Kind.FAILED}),
                        url="http://127.0.0.1:9/", sealed_secret=seal_secret("whsec_x", A), created_ms=1)
    await store.notifications.add_subscription(hook)
    await clear_key(store, "older")
    assert await seal_stored(store, A, "first") is not None  # the first start after the upgrade

    with structlog.testing.capture_logs() as logs:
        done = await seal_stored(store, f"{B},{A}", "rotating")
    assert done is not None and done.rotated
    assert (done.progress.keys, done.progress.jobs, done.progress.hooks) == (4, 2, 1)
    assert logs[-1]["event"] == ("re-sealed 4 job keys (0 of them stored in clear by an earlier paiq), 2 jobs' "
                                 "secrets and 1 webhooks' signing keys under the new first key of PAIQ_SECRETS_KEY; "
                                 "the old key may now be removed")

    # the old key dropped: B alone opens every key, the active jobs' secrets and the webhook's key
    assert await seal_stored(store, B, "after") is None
    for key in keys:
        stored = await store.job_key(key.job_id)
        assert stored is not None and stored.opened(B) == key
    for job in (active, big):
        found = await store.get_job(job.id)
        assert found is not None and open_secrets(found.config, B) == open_secrets(job.config, A)
    sub = await store.notifications.subscription(hook.id)
    assert sub is not None and open_secret(sub.sealed_secret, B) == "whsec_x"
    # an ended job's secrets are never opened again: left under the old key, which is gone
    found = await store.get_job(ended.id)
    assert found is not None
    with pytest.raises(SealedValueError):
        open_secrets(found.config, B)


async def test_a_start_while_another_seals_goes_on_without_waiting(store: Store) -> None:
    key = await clear_key(store, "waiting")
    assert await store.hold_lease(resealing.LEASE, "another", 60_000)
    assert await seal_stored(store, A, "me") is None
    stored = await store.job_key(key.job_id)
    assert stored is not None and stored.clear_private_key is not None  # the other holder's to seal


async def test_a_key_sealed_with_a_removed_key_is_left_and_named(store: Store) -> None:
    job = job_named(unique("lost"))
    await store.submit_job(job, encoded_job(job), new_job_key(job, ()).sealed(B))
    done = await seal_stored(store, A, "me")
    assert done is not None and done.progress.unopened == [f"the SSH key of job {job.id}"]
    assert "1 could not be opened with any key of PAIQ_SECRETS_KEY" in done.sentence()
    assert isinstance(await store.job_key(job.id), StoredJobKey)
