"""The embedded MongoDB-wire server picks a free port, but only binds it later; on a busy host (a test run,
a developer's laptop) another process can take it in between. paiq up must then use a new port, and above
all never take another server that answers on the lost port for its own database."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from pymongo import AsyncMongoClient

from shared.db import embedded
from shared.db.embedded import embedded_mongo
from shared.errors import StoreError


def _ports(monkeypatch: pytest.MonkeyPatch, first: list[int]) -> list[int]:
    """free_port() answers ``first`` in order, then truly free ports; the list of ports it answered."""
    given: list[int] = []
    real = embedded.free_port
    queue: Iterator[int] = iter(first)

    def pick() -> int:
        port = next(queue, None) or real()
        given.append(port)
        return port

    monkeypatch.setattr(embedded, "free_port", pick)
    return given


async def _marker(uri: str) -> list[str]:
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(uri)
    try:
        return [str(d["name"]) async for d in client.probe.owner.find({}, {"_id": 0})]
    finally:
        await client.close()


async def test_a_port_taken_by_another_server_is_not_mistaken_for_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    async with embedded_mongo(None) as first:
        client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(first)
        await client.probe.owner.insert_one({"name": "the first server"})
        await client.close()
        taken = urlsplit(first).port

        given = _ports(monkeypatch, [taken])
        async with embedded_mongo(None) as second:
            assert len(given) == 2 and given[0] == taken, given
            assert urlsplit(second).port == given[1]
            assert await _marker(second) == []  # its own, empty database, not the first server's
        assert await _marker(first) == ["the first server"]  # and the first server was left alone


async def test_a_port_taken_by_any_listener_is_tried_again_on_a_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()  # a listener that is not a database at all: the server's bind fails and it exits
        taken = int(squatter.getsockname()[1])
        given = _ports(monkeypatch, [taken])
        async with embedded_mongo(None) as uri:
            assert given[0] == taken and urlsplit(uri).port == given[-1], (given, uri)
            client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(uri)
            assert (await client.admin.command("ping"))["ok"] == 1
            await client.close()


async def test_three_lost_ports_in_a_row_fail_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = int(squatter.getsockname()[1])
        _ports(monkeypatch, [taken, taken, taken])
        with pytest.raises(StoreError, match=r"did not start in 3 tries, each on a new port; the last: it exited "
                                             r"with code 1 before it answered"):
            async with embedded_mongo(None):
                pass
