"""shared.dbretry and shared.idempotency: writes tried again across a restart, keys checked."""

from __future__ import annotations

import pytest
from pymongo.errors import AutoReconnect, OperationFailure, ServerSelectionTimeoutError

from shared import dbretry
from shared.dbretry import idempotent
from shared.idempotency import IdempotencyRecord, key_problem

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
