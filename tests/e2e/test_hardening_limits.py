"""Issue 17 against the real platform: a job body can neither stall nor bloat submit, and bad input is a 400.

The attacker's bodies (a million tasks in 9 KB, bodies nested past any decoder, lone surrogates and NUL
characters where MongoDB or the engine cannot take them, a body of a quarter million values) are each
refused quickly with the path and the limit named, nothing of them is stored, and the API keeps
answering meanwhile; the largest job the limits allow is stored and given back as sent.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from services.cli.client import PaiqClient
from tests.e2e.conftest import ALL_IN_ONE_ONLY, job_config, raw, token_of
from tests.infra import Platform

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180), ALL_IN_ONE_ONLY]  # the API's own handling

QUICK_S = 3.0  # a refusal's bound, generous for a loaded test machine (they take milliseconds alone)


def body_of(name: str, **extra: Any) -> dict[str, Any]:
    return job_config(name, command="true", **extra)


def text_with(name: str, placeholder: str, raw_json: bytes, **extra: Any) -> bytes:
    """A job body whose ``placeholder`` string is replaced by ``raw_json`` (escapes as sent on the wire)."""
    return json.dumps(body_of(name, **extra)).encode().replace(f'"{placeholder}"'.encode(), raw_json)


def attackers_bodies() -> list[tuple[str, bytes, tuple[str, ...]]]:
    """(job name, body, words its refusal must hold)."""
    million = body_of("million", roles=[{"name": f"role{i}", "taskNumber": 10_000, "command": "true"}
                                         for i in range(100)])
    return [
        ("million", json.dumps(million).encode(),
         ("taskRoles: the job has 1,000,000 tasks in all", "at most 5,000 tasks per job (PAIQ_MAX_JOB_TASKS)")),
        ("deep500", text_with("deep500", "D", b"[" * 500 + b"]" * 500, extras={"a": "D"}),
         ("extras.a[0]", "nests objects and lists 502 levels deep", "at most 32 levels (PAIQ_MAX_JSON_DEPTH)")),
        ("deep10000", text_with("deep10000", "D", b"[" * 10_000 + b"]" * 10_000, extras={"a": "D"}),
         ("(body): nests objects and lists 10,002 levels deep", "PAIQ_MAX_JSON_DEPTH")),
        ("sur-extras", text_with("sur-extras", "S", b'"\\udfff"', extras={"a": {"b": "S"}}),
         ("extras.a.b: holds a lone surrogate",)),
        ("sur-envs", text_with("sur-envs", "S", b'"x\\ud800"', jobEnvs={"A": "S"}),
         ("jobEnvs.A: holds a lone surrogate",)),
        ("sur-unknown", text_with("sur-unknown", "S", b'"\\udfff"', tmp="S"), ("tmp: holds a lone surrogate",)),
        ("sur-key", text_with("sur-key", "K", b'{"\\udfff": 1}', extras={"k": "K"}),
         ("extras.k.\\udfff: key holds a lone surrogate",)),
        ("nul-key", text_with("nul-key", "K", b'{"a\\u0000b": 1}', extras={"k": "K"}),
         ("extras.k.a\\u0000b: key holds a NUL character",)),
        ("nul-env", text_with("nul-env", "N", b'"a\\u0000b"', jobEnvs={"A": "N"}),
         ("jobEnvs.A: holds a NUL character",)),
        ("values", text_with("values", "V", b"[" + b"[]," * 250_000 + b"[]]", extras={"v": "V"}),
         ("(body): holds 250,", "at most 10,000 in a job (PAIQ_MAX_JSON_VALUES)")),
        ("huge-int", text_with("huge-int", "I", b"9" * 30, extras={"n": "I"}),
         ("extras.n: an integer of 30 digits", "at most 8 bytes")),
    ]


async def test_the_attackers_bodies_are_refused_quickly_and_nothing_is_stored(
        platform: Platform, api: PaiqClient, user: str) -> None:
    headers = {"Authorization": f"Bearer {await token_of(platform, user)}", "Content-Type": "application/json"}
    for name, body, words in attackers_bodies():
        assert len(body) <= 1024 * 1024, name
        started = time.monotonic()
        status, answer, _ = await raw(platform, "POST", f"/api/v1/user/{user}/jobs", data=body, headers=headers)
        took = time.monotonic() - started
        assert status == 400 and answer["code"] == "InvalidParametersError", (name, status, answer)
        for word in words:
            assert word in answer["message"], (name, answer["message"])
        assert "pydantic" not in answer["message"] and "http" not in answer["message"]
        assert took < QUICK_S, f"{name} took {took:.2f} s"
    assert await api.jobs(user) == []
    for name, _, _ in attackers_bodies():
        status, _, _ = await raw(platform, "GET", f"/api/v1/user/{user}/jobs/{name}")
        assert status == 404, name


async def test_the_api_keeps_answering_while_the_attacker_sends(
        platform: Platform, api: PaiqClient, user: str) -> None:
    headers = {"Authorization": f"Bearer {await token_of(platform, user)}", "Content-Type": "application/json"}
    bodies = [body for _, body, _ in attackers_bodies()] * 3
    latencies: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        while not done.is_set():
            started = time.monotonic()
            status, _, _ = await raw(platform, "GET", "/api/v1")
            latencies.append(time.monotonic() - started)
            assert status == 200
            await asyncio.sleep(0.01)

    prober = asyncio.create_task(probe())
    gate = asyncio.Semaphore(4)

    async def send(body: bytes) -> int:
        async with gate:
            status, _, _ = await raw(platform, "POST", f"/api/v1/user/{user}/jobs", data=body, headers=headers)
            return status

    statuses = await asyncio.gather(*(send(b) for b in bodies))
    done.set()
    await prober
    assert set(statuses) == {400}
    assert latencies and max(latencies) < QUICK_S, max(latencies)
    assert await api.jobs(user) == []


async def test_the_largest_job_the_limits_allow_is_stored_and_given_back(
        platform: Platform, api: PaiqClient, user: str) -> None:
    """Two roles of 2,245 tasks (about the most whose environments fit), extras nested to the limit, a
    string of 128 KiB and characters beyond the BMP: accepted, stored and given back as sent."""
    chain: Any = []
    for _ in range(28):  # the body, extras and "deep" are three levels more: 32 in all
        chain = [chain]
    config = body_of("largest", roles=[{"name": f"r{i}", "taskNumber": 2245, "cpuNumber": 1024, "command": "true"}
                                       for i in range(2)],
                     extras={"deep": chain, "blob": "x" * (128 * 1024), "emoji": "\U0001f600"},
                     jobEnvs={"E": "\u00e9t\u00e9"})
    answer, _ = await api.submit(user, json.dumps(config).encode())
    assert "successfully" in answer["message"]
    try:
        assert await api.config(user, "largest") == config
        detail = await api.job(user, "largest")
        assert sum(len(r["taskStatuses"]) for r in detail["taskRoles"].values()) == 4490
    finally:
        await api.delete(user, "largest")
