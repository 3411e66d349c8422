"""Passwords are hashed with bcrypt at the cost the operator sets (``PAIQ_PASSWORD_HASH_ROUNDS``, 12 unless set,
bcrypt's own default), a stored password keeps the cost it was set with, and an unknown user's login is checked
against a hash of the same cost (the same time as a wrong password). The other tests run at cost 4
(tests/infra.py), so this is where the default is held."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.submit.app import start_submit
from services.submit.users import Users
from shared.bus.memory import MemoryBus
from shared.db.store import Store, open_store
from shared.ops.vitals import Vitals
from shared.settings.model import Settings
from tests.infra import free_port, unique

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(mongo_uri: str) -> AsyncIterator[Store]:
    async with open_store(mongo_uri, unique("pwcost_")) as s:
        await s.ensure_indexes()
        yield s


async def stored_cost(store: Store, user: str) -> str:
    doc = await store.users.find_one({"_id": user})
    assert doc is not None
    return str(doc["password_hash"]).split("$")[2]


async def test_the_default_cost_is_bcrypts_and_a_stored_password_keeps_its_own(store: Store) -> None:
    assert Settings.from_env({}).password_hash_rounds == 12
    await Users(store).create("dflt", "a-long-enough-password", admin=False)
    assert await stored_cost(store, "dflt") == "12"
    cheaper = Users(store, rounds=5)
    await cheaper.create("cheap", "a-long-enough-password", admin=False)
    assert await stored_cost(store, "cheap") == "05"
    assert await cheaper.check_password("dflt", "a-long-enough-password")  # made at 12, still checked at 12
    assert not await cheaper.check_password("dflt", "wrong-password")
    assert not await cheaper.check_password("nobody", "a-long-enough-password")
    assert cheaper._dummy_hash.split(b"$")[2] == b"05", "an unknown user costs what a known one does"


async def test_the_submit_service_hashes_at_the_configured_cost(store: Store) -> None:
    settings = Settings.from_env({"PAIQ_PASSWORD_HASH_ROUNDS": "6", "PAIQ_ADMIN_USER": "root",
                                  "PAIQ_ADMIN_PASSWORD": "a-long-enough-password", "PAIQ_API_PORT": str(free_port())})
    runner = await start_submit(settings, store, MemoryBus(), Vitals())
    try:
        assert await stored_cost(store, "root") == "06"  # the administrator made at start
    finally:
        await runner.cleanup()
