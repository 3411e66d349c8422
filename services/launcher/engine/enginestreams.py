"""The engine's streamed answers (its event stream, a followed container's log): opened on the engine's
threads within the call timeout, then read each in a thread of its own, for as long as they last."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections.abc import Iterator
from typing import Any

import requests
from docker.types import CancellableStream

from services.launcher.engine.driver import LogLine
from services.launcher.engine.enginestats import engine_time_ns

FRAME_HEADER = struct.Struct(">BxxxL")  # a multiplexed log frame's header: stream (1 stdout, 2 stderr), length


def open_stream(api: Any, url: str, params: dict[str, Any]) -> requests.Response:
    """A streamed answer of the engine (its events, a followed log): its headers awaited for the client's call
    timeout at most (a hung engine fails it, freeing the thread), its body then read with no timeout (a
    followed container may stay quiet for hours). APIError (NotFound...) for an error status."""
    response: requests.Response = api.get(url, params=params, stream=True, timeout=api.timeout)
    try:
        api._raise_for_status(response)
        raw: Any = response.raw
        api._disable_socket_timeout(raw._fp.fp.raw)  # the socket the body comes on: no deadline now
    except BaseException:
        response.close()
        raise
    return response


class LogPump:
    """Reads one log answer in its own thread and hands its lines to the event loop (None: the end)."""

    def __init__(self, response: requests.Response, since_ns: int, loop: asyncio.AbstractEventLoop) -> None:
        # The SDK's cancellable wrapper: closing it shuts the socket down, which wakes the blocked read
        # (closing the response would wait for that read to return: until the container writes or ends).
        self._frames = CancellableStream(_frames(response), response)
        self._since_ns = since_ns
        self._loop = loop
        self._closed = threading.Event()
        self.queue: asyncio.Queue[LogLine | BaseException | None] = asyncio.Queue()

    def _put(self, item: LogLine | BaseException | None) -> None:
        try:
            self._loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the loop is gone
            self._closed.set()

    def run(self) -> None:
        try:
            for stream, payload in self._frames:
                if self._closed.is_set():
                    return
                line = _log_line(stream, payload, self._since_ns)
                if line is not None:
                    self._put(line)
        except Exception as e:
            if not self._closed.is_set():
                self._put(e)
        finally:
            self._put(None)

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(Exception):
            self._frames.close()


def _frames(response: requests.Response) -> Iterator[tuple[int, bytes]]:
    """(stream, payload) of each frame of a non-TTY container's log answer (1 stdout, 2 stderr).

    Not ``docker.utils.socket.frames_iter``: that reads a hijacked socket (attach, exec), whose bytes are
    the frames themselves. A log answer is an HTTP body sent chunked, which the HTTP client has partly
    read ahead into its buffer: its frames are read from the decoded body (``response.raw``), whole.
    """
    while True:
        header = response.raw.read(FRAME_HEADER.size)
        if len(header) < FRAME_HEADER.size:
            return
        stream, length = FRAME_HEADER.unpack(header)
        if not length:
            continue
        payload = response.raw.read(length)
        if not payload:
            return
        yield stream, payload


def _log_line(stream: int, payload: bytes, since_ns: int) -> LogLine | None:
    stamp, _, text = payload.decode(errors="replace").partition(" ")
    try:
        ts = engine_time_ns(stamp)
    except ValueError:
        ts, text = 0, payload.decode(errors="replace")
    if since_ns and ts <= since_ns:
        return None  # kept already (the engine's `since` is inclusive)
    return LogLine(stream="stderr" if stream == 2 else "stdout", ts_ns=ts, text=text)
