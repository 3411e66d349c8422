"""The embedded database serves nobody without its login, and its files are its owner's alone: a task or
another user of the machine that reaches its port or its directory reads nothing (issue: hostile tenants)."""

from __future__ import annotations

import asyncio
import stat
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import OperationFailure, PyMongoError

from shared.db.embedded import LOGIN_FILE, DbLogin, _server_binary, embedded_mongo, free_port, local_login


def _client(uri: str) -> AsyncMongoClient[dict[str, Any]]:
    return AsyncMongoClient(uri, serverSelectionTimeoutMS=3000)


def _without_login(uri: str) -> str:
    port = urlsplit(uri).port
    return f"mongodb://127.0.0.1:{port}/?directConnection=true"


def _modes(root: Path) -> dict[str, int]:
    found = {str(root): stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        found[str(path)] = stat.S_IMODE(path.stat().st_mode)
    return found


async def test_without_its_login_the_server_answers_nothing_but_the_handshake(tmp_path: Path) -> None:
    login = local_login(tmp_path)
    async with embedded_mongo(tmp_path / "db", login=login) as uri:
        owner = _client(uri)
        await owner.paiq.job_keys.insert_one({"_id": "alice~job", "private_key": "k"})
        stranger = _client(_without_login(uri))
        assert (await stranger.admin.command("ping"))["ok"] == 1  # the handshake, as mongod answers it
        for attempt in (stranger.paiq.job_keys.find_one({}),
                        stranger.paiq.tokens.insert_one({"_id": "forged", "user": "root"}),
                        stranger.admin.command("listDatabases")):
            with pytest.raises(OperationFailure) as refused:
                await attempt
            assert refused.value.code == 13, refused.value.details  # Unauthorized
        guesser = _client(uri.replace(login.password, "guessed"))
        with pytest.raises(OperationFailure) as failed:
            await guesser.paiq.job_keys.find_one({})
        assert failed.value.code == 18  # AuthenticationFailed
        assert await owner.paiq.tokens.count_documents({}) == 0
        for c in (owner, stranger, guesser):
            await c.close()


async def test_its_login_is_made_once_and_readable_by_its_owner_only(tmp_path: Path) -> None:
    first = local_login(tmp_path)
    assert local_login(tmp_path) == first
    assert stat.S_IMODE((tmp_path / LOGIN_FILE).stat().st_mode) == 0o600
    assert len(first.password) >= 40 and first.password not in repr(first)


async def test_its_files_are_its_owners_alone(tmp_path: Path) -> None:
    log = tmp_path / "db.log"
    async with embedded_mongo(tmp_path / "db", login=local_login(tmp_path), log_file=log) as uri:
        client = _client(uri)
        await client.paiq.jobs.insert_many([{"n": i} for i in range(100)])
        await client.close()
        modes = _modes(tmp_path / "db")
    assert modes, "the database wrote no file"
    wrong = {p: oct(m) for p, m in modes.items() if m != (0o700 if Path(p).is_dir() else 0o600)}  # noqa: ASYNC240
    assert not wrong, f"readable by others: {wrong}"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


async def test_an_older_paiqs_open_database_is_given_its_login_and_closed_keeping_its_data(tmp_path: Path) -> None:
    """A data directory an older paiq up wrote: no login, the server run without --auth, files 0644."""
    storage = tmp_path / "db"
    storage.mkdir()
    port = free_port()
    old = subprocess.Popen([_server_binary(), "--host", "127.0.0.1", "--port", str(port),  # noqa: ASYNC220
                            "--storage-path", str(storage)], umask=0o022, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        client = _client(f"mongodb://127.0.0.1:{port}/?directConnection=true")
        for _ in range(100):
            try:
                await client.admin.command("ping")
                break
            except PyMongoError:  # not up yet
                await asyncio.sleep(0.1)
        await client.paiq.jobs.insert_one({"_id": "bob~old-job"})
        await client.close()
    finally:
        old.terminate()
        await asyncio.to_thread(old.wait, 10)
    assert any(m & 0o044 for m in _modes(storage).values()), "the old server's files were readable: the premise"

    login = local_login(tmp_path)
    async with embedded_mongo(storage, login=login) as uri:
        client = _client(uri)
        assert await client.paiq.jobs.find_one({"_id": "bob~old-job"}) == {"_id": "bob~old-job"}
        await client.close()
        stranger = _client(_without_login(uri))
        with pytest.raises(OperationFailure):
            await stranger.paiq.jobs.find_one({})
        await stranger.close()
    assert not {p: oct(m) for p, m in _modes(storage).items() if m & 0o077}


async def test_a_login_that_no_longer_matches_is_set_again_at_start(tmp_path: Path) -> None:
    """The login file restored from elsewhere (or made anew after it was lost): the server's user gets it."""
    storage = tmp_path / "db"
    async with embedded_mongo(storage, login=DbLogin("paiq", "first-password-of-forty-characters-xxxxx")):
        pass
    second = DbLogin("paiq", "second-password-of-forty-characters-yyyy")
    async with embedded_mongo(storage, login=second) as uri:
        client = _client(uri)
        assert (await client.admin.command("ping"))["ok"] == 1
        await client.paiq.probe.insert_one({})
        await client.close()
