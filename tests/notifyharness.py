"""Real receivers for the notify service's tests and benchmark: an SMTP server (aiosmtpd) that keeps what it
accepts, and an HTTP server (aiohttp) with endpoints that answer 200, 500, 500 a few times then 200, or hang,
and that checks each POST's signature. A refused endpoint is a port nothing listens on."""

from __future__ import annotations

import asyncio
import email
import email.policy
import json
import socket
import time
from collections import defaultdict
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from aiohttp import web
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from shared.notify.signing import SIGNATURE_HEADER, verify


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Mail:
    to: str
    message: EmailMessage
    at: float


class MailBox:
    """aiosmtpd's handler: every message it accepted, with when. An address starting with ``down`` is refused
    for now (451, a mailbox temporarily unavailable: the sender should try again), every time."""

    def __init__(self) -> None:
        self.mails: list[Mail] = []
        self.refused = 0

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope, address: str,  # noqa: N802
                          rcpt_options: list[str]) -> str:
        if address.startswith("down"):
            self.refused += 1
            return "451 4.2.1 Mailbox temporarily unavailable"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:  # noqa: N802
        content = envelope.content if isinstance(envelope.content, bytes) else str(envelope.content).encode()
        msg = email.message_from_bytes(content, policy=email.policy.default)
        assert isinstance(msg, EmailMessage)
        for rcpt in envelope.rcpt_tos:
            self.mails.append(Mail(to=rcpt, message=msg, at=time.time()))
        return "250 Message accepted for delivery"

    def to(self, address: str) -> list[Mail]:
        return [m for m in self.mails if m.to == address]


class SmtpServer:
    def __init__(self) -> None:
        self.box = MailBox()
        self.port = free_port()
        self._controller = Controller(self.box, hostname="127.0.0.1", port=self.port)

    def __enter__(self) -> SmtpServer:
        self._controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._controller.stop()


@dataclass
class Received:
    body: dict[str, Any]
    headers: dict[str, str]
    at: float
    signed: bool


@dataclass
class Hooks:
    """Endpoints at /ok/{name}, /fail/{name} (500 always), /flaky/{n}/{name} (500 the first n times, then
    200), /slow/{seconds}/{name}, /hang/{name} and /hang-once/{name} (the first POST hangs); ``received`` keeps
    what each answered 200 to, by name; ``seen`` counts every POST, answered or not."""

    secrets: dict[str, str] = field(default_factory=dict)  # name -> signing key, to check signatures
    received: dict[str, list[Received]] = field(default_factory=lambda: defaultdict(list))
    seen: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    port: int = 0
    _runner: web.AppRunner | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    async def _take(self, request: web.Request, name: str) -> None:
        body = await request.read()
        secret = self.secrets.get(name, "")
        self.received[name].append(Received(body=json.loads(body), headers=dict(request.headers), at=time.time(),
                                            signed=bool(secret) and verify(secret, body,
                                                                           request.headers.get(SIGNATURE_HEADER, ""))))

    async def ok(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.seen[name] += 1
        await self._take(request, name)
        return web.Response(text="ok")

    async def fail(self, request: web.Request) -> web.Response:
        self.seen[request.match_info["name"]] += 1
        return web.Response(status=500, text="down")

    async def flaky(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.seen[name] += 1
        if self.seen[name] <= int(request.match_info["n"]):
            return web.Response(status=500, text="not yet")
        await self._take(request, name)
        return web.Response(text="ok")

    async def slow(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.seen[name] += 1
        await asyncio.sleep(float(request.match_info["seconds"]))
        await self._take(request, name)
        return web.Response(text="ok")

    async def hang(self, request: web.Request) -> web.Response:
        self.seen[request.match_info["name"]] += 1
        await asyncio.sleep(3600)
        return web.Response(text="never")

    async def hang_once(self, request: web.Request) -> web.Response:
        """The first POST hangs (a notifier killed meanwhile never hears back); the next ones are taken."""
        name = request.match_info["name"]
        self.seen[name] += 1
        if self.seen[name] == 1:
            await asyncio.sleep(3600)
        await self._take(request, name)
        return web.Response(text="ok")

    async def __aenter__(self) -> Hooks:
        app = web.Application()
        app.router.add_post("/ok/{name}", self.ok)
        app.router.add_post("/fail/{name}", self.fail)
        app.router.add_post("/flaky/{n}/{name}", self.flaky)
        app.router.add_post("/slow/{seconds}/{name}", self.slow)
        app.router.add_post("/hang/{name}", self.hang)
        app.router.add_post("/hang-once/{name}", self.hang_once)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def wait_until(check: Any, limit_s: float, what: str) -> None:
    deadline = time.monotonic() + limit_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {limit_s:g} s: {what}")
        await asyncio.sleep(0.05)
