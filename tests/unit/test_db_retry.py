"""shared.db.retry and shared.db.idempotency: writes tried again across a restart, keys checked."""

from __future__ import annotations

import pytest
from pymongo.errors import AutoReconnect, OperationFailure, ServerSelectionTimeoutError

from shared.db import retry as dbretry
from shared.db.idempotency import IdempotencyRecord, key_problem
from shared.db.retry import idempotent

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dbretry, "FIRST_DELAY_SECONDS", 0.001)
    monkeypatch.setattr(dbretry, "MAX_DELAY_SECONDS", 0.002)


def flaky(failures: list[Exception]) -> tuple[list[int], object]:
    calls: list[int] = []

    async def op() -> str:
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return "done"

    return calls, op


async def test_connection_errors_are_tried_again_until_the_write_goes_through() -> None:
    calls, op = flaky([AutoReconnect("connection closed"), ServerSelectionTimeoutError("no server")])
    assert await idempotent(op, "test write") == "done"  # type: ignore[arg-type]
    assert len(calls) == 3


async def test_past_the_window_the_error_is_raised() -> None:
    calls, op = flaky([AutoReconnect("closed")] * 1000)
    with pytest.raises(AutoReconnect):
        await idempotent(op, "test write", window_seconds=0.05)  # type: ignore[arg-type]
    assert len(calls) > 1


async def test_other_errors_are_not_tried_again() -> None:
    calls, op = flaky([OperationFailure("bad update", code=9)])
    with pytest.raises(OperationFailure):
        await idempotent(op, "test write")  # type: ignore[arg-type]
    assert len(calls) == 1


@pytest.mark.parametrize(("value", "problem"), [
    ("a", None), ("x" * 255, None), ("3f0c9a7e-5b1e-4a7e-9c1e-2b7a1d0f9e11", None),
    ("", "Idempotency-Key: must be 1-255 characters, got 0"),
    ("x" * 256, "Idempotency-Key: must be 1-255 characters, got 256"),
    ("has space", "Idempotency-Key: must be visible ASCII characters (no spaces)"),
    ("ключ", "Idempotency-Key: must be visible ASCII characters (no spaces)"),
])
def test_an_idempotency_key_is_visible_ascii_of_bounded_length(value: str, problem: str | None) -> None:
    assert key_problem(value) == problem


def test_a_key_is_per_user_and_remembers_the_body() -> None:
    a = IdempotencyRecord.new(user="alice", key="k", job_id="alice~j~1", job_name="j", body=b"{}", warnings=())
    b = IdempotencyRecord.new(user="bob", key="k", job_id="bob~j~1", job_name="j", body=b"{}", warnings=())
    assert a.id != b.id
    assert a.body_sha256 == b.body_sha256
    assert IdempotencyRecord.from_document(a.to_document()) == a


async def test_a_submission_no_try_of_which_reached_a_server_is_refused_as_not_stored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No server selected on any try: nothing can have been stored, so the answer is the plain outage (503,
    nothing stored), not "whether it was stored is unknown" (and the database is not asked)."""
    from pymongo import AsyncMongoClient

    from shared.db import submission
    from shared.db.store import Store
    from shared.errors import SubmitOutcomeUnknownError
    from tests.unit.factories import make_job

    monkeypatch.setattr(submission, "WINDOW_SECONDS", 0.2)
    tries: list[int] = []

    async def unreachable(*args: object) -> None:
        tries.append(1)
        raise ServerSelectionTimeoutError("no server")

    async def never_asked(*args: object) -> bool:
        raise AssertionError("asked the database whether a job that was never sent is stored")

    monkeypatch.setattr(submission, "_submit_once", unreachable)
    monkeypatch.setattr(submission, "_stored", never_asked)
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient("mongodb://127.0.0.1:9", connect=False)
    job = make_job()
    with pytest.raises(ServerSelectionTimeoutError) as caught:
        await Store(client, "x").submit_job(job, None, None)  # type: ignore[arg-type]
    assert not isinstance(caught.value, SubmitOutcomeUnknownError)
    assert len(tries) > 1, "tried again within the window"
