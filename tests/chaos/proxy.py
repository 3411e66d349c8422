"""A TCP proxy that can stop forwarding: a network path to the database that hangs without closing (a
blackholed route, a wedged load balancer), which a killed server never shows a client; or, in front of a
unix socket (the Docker engine's), an engine that accepts calls and never answers."""

from __future__ import annotations

import asyncio
import contextlib

from shared.db.embedded import free_port

CHUNK = 65536


class FreezingProxy:
    """127.0.0.1:<port> forwards to ``target_port`` (or to the unix socket ``target_socket``); while frozen,
    bytes are held (in both directions) and new connections are accepted but get nothing: every call in
    flight or made meanwhile hangs."""

    def __init__(self, target_port: int = 0, *, target_socket: str = "") -> None:
        self.target_port = target_port
        self.target_socket = target_socket
        self.port = free_port()
        self.flowing = asyncio.Event()
        self.flowing.set()
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    def freeze(self) -> None:
        self.flowing.clear()

    def thaw(self) -> None:
        self.flowing.set()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        await self.flowing.wait()
        try:
            server_r, server_w = await (asyncio.open_unix_connection(self.target_socket) if self.target_socket
                                        else asyncio.open_connection("127.0.0.1", self.target_port))
        except OSError:
            client_w.close()
            return
        for reader, writer in ((client_r, server_w), (server_r, client_w)):
            task = asyncio.create_task(self._pump(reader, writer))
            self._pumps.add(task)
            task.add_done_callback(self._pumps.discard)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(CHUNK):
                await self.flowing.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._pumps):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._pumps, return_exceptions=True)
