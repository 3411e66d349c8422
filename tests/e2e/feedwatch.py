"""Knowing when a live event feed (``GET /api/v1/events``) is connected, instead of sleeping and hoping.

The submit service writes the comment line ``: paiq event feed`` right after it registered a client
(services/submit/routes/feed.py): every event published after a test has seen that line reaches the client. The
feed sends nothing else before the first event, so that line is the only signal there is:

- :func:`follow_feed` reads the feed itself (the server's Server-Sent Events, parsed here) and sets an
  event once the line came;
- :class:`FeedProxy` sits between a client the test cannot look into (the ``paiq events`` process) and
  the API, and sets an event once the line went through it to that client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.parse
from collections.abc import Callable
from typing import Any

import aiohttp

from shared.db.embedded import free_port

FEED_OPEN = b": paiq event feed"


async def follow_feed(api: str, seen: list[dict[str, Any]], connected: asyncio.Event, *, user: str | None = None,
                      job: str | None = None, until: Callable[[dict[str, Any]], bool] = lambda _: False) -> None:
    """Append every event of the feed to ``seen`` (each as its CloudEvents JSON) until ``until`` holds for
    one; ``connected`` is set once the server has registered this client."""
    query = {k: v for k, v in (("user", user), ("job", job)) if v}
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession() as session, \
            session.get(f"{api}/api/v1/events", params=query, timeout=timeout) as resp:
        assert resp.status == 200, resp.status
        async for raw in resp.content:
            if raw.startswith(FEED_OPEN):
                connected.set()
            elif raw.startswith(b"data: "):
                event = dict(json.loads(raw[len(b"data: "):]))
                seen.append(event)
                if until(event):
                    return


async def connected_feed(api: str, seen: list[dict[str, Any]], limit_s: float = 30, **kw: Any) -> asyncio.Task[None]:
    """:func:`follow_feed` in the background, returned once it is connected."""
    connected = asyncio.Event()
    task = asyncio.create_task(follow_feed(api, seen, connected, **kw))
    waiter = asyncio.create_task(connected.wait())
    done, _ = await asyncio.wait({task, waiter}, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if task in done:
        task.result()  # its failure, if it failed
    if not connected.is_set():
        task.cancel()
        raise AssertionError(f"the event feed was not connected within {limit_s} s")
    return task


class FeedProxy:
    """127.0.0.1:<port> forwards to the API at ``api``; ``feed_open`` is set once the feed's opening line
    went through to a client."""

    def __init__(self, api: str) -> None:
        target = urllib.parse.urlsplit(api)
        self.target = (target.hostname or "127.0.0.1", target.port or 80)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.feed_open = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> FeedProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._pumps):
            task.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.close()
            return
        for reader, writer, watch in ((client_r, server_w, False), (server_r, client_w, True)):
            task = asyncio.create_task(self._pump(reader, writer, watch))
            self._pumps.add(task)
            task.add_done_callback(self._pumps.discard)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, watch: bool) -> None:
        seen = b""
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
                if watch and not self.feed_open.is_set():
                    seen = (seen + data)[-4096:]
                    if FEED_OPEN in seen:
                        self.feed_open.set()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.close()
