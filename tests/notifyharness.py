"""Real receivers for the notify service's tests and benchmark: an SMTP server (aiosmtpd) that keeps what it
accepts, and an HTTP server (aiohttp) with endpoints that answer 200, 500, 500 a few times then 200, or hang,
and that checks each POST's signature. A refused endpoint is a port nothing listens on."""

from __future__ import annotations

import asyncio
import email
import email.policy
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from shared.db.embedded import free_port
from shared.notify.signing import SIGNATURE_HEADER, verify

REPO = Path(__file__).resolve().parents[1]


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
    route: str = "ok"  # the endpoint's kind: ok, flaky, slow, hang-once


@dataclass
class Hooks:
    """Endpoints at /ok/{name}, /fail/{name} (500 always), /flaky/{n}/{name} (500 the first n times, then
    200), /slow/{seconds}/{name}, /hang/{name} and /hang-once/{name} (the first POST hangs); ``received`` keeps
    what each answered 200 to, by name; ``seen`` counts every POST, answered or not."""

    secrets: dict[str, str] = field(default_factory=dict)  # name -> signing key, to check signatures
    received: dict[str, list[Received]] = field(default_factory=lambda: defaultdict(list))
    seen: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    in_flight: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # POSTs a slow endpoint holds now
    most_at_once: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # ... and at most, so far
    port: int = 0
    mailbox: MailBox | None = None  # served as a process (:class:`Receivers`): its mail is reported too
    _runner: web.AppRunner | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    async def _take(self, request: web.Request, name: str) -> None:
        self._keep(request, name, await request.read(), request.path.split("/")[1])

    def _keep(self, request: web.Request, name: str, body: bytes, route: str) -> None:
        secret = self.secrets.get(name, "")
        self.received[name].append(Received(body=json.loads(body), headers=dict(request.headers), at=time.time(),
                                            signed=bool(secret) and verify(secret, body,
                                                                           request.headers.get(SIGNATURE_HEADER, "")),
                                            route=route))

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
        body = await request.read()  # before the wait: the sender has given up by then
        self.in_flight[name] += 1
        self.most_at_once[name] = max(self.most_at_once[name], self.in_flight[name])
        try:
            await asyncio.sleep(float(request.match_info["seconds"]))
        finally:
            self.in_flight[name] -= 1
        self._keep(request, name, body, "slow")
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

    async def tally(self, request: web.Request) -> web.Response:
        """How many messages the mailbox took and the /ok endpoints answered (cheap, polled)."""
        ok = sum(1 for got in self.received.values() for r in got if r.route == "ok")
        return web.json_response({"mails": len(self.mailbox.mails) if self.mailbox else 0, "ok": ok})

    async def dump(self, request: web.Request) -> web.Response:
        """Every message taken, with when: mails by address and subject, POSTs by name, route and subject."""
        box = self.mailbox or MailBox()
        return web.json_response({
            "mails": [{"to": m.to, "subject": str(m.message["Subject"]), "at": m.at} for m in box.mails],
            "hooks": [{"name": name, "route": r.route, "subject": r.body.get("subject"), "at": r.at}
                      for name, got in self.received.items() for r in got],
            "refused": box.refused, "seen": dict(self.seen)})

    async def __aenter__(self) -> Hooks:
        app = web.Application()
        app.router.add_get("/_tally", self.tally)
        app.router.add_get("/_dump", self.dump)
        app.router.add_post("/ok/{name}", self.ok)
        app.router.add_post("/fail/{name}", self.fail)
        app.router.add_post("/flaky/{n}/{name}", self.flaky)
        app.router.add_post("/slow/{seconds}/{name}", self.slow)
        app.router.add_post("/hang/{name}", self.hang)
        app.router.add_post("/hang-once/{name}", self.hang_once)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        # port 0: bound at once, so no other process can take the port between choosing and binding it
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])
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


class Receivers:
    """The SMTP server and the endpoints in a process of their own (python -m tests.notifyharness), so that a
    benchmark's notifier does not share its process, and its one core, with them; read back over HTTP."""

    def __init__(self) -> None:
        self.smtp_port = self.port = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._http: aiohttp.ClientSession | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    @property
    def pid(self) -> int:
        return self._proc.pid if self._proc is not None else 0

    async def _get(self, path: str) -> dict[str, Any]:
        assert self._http is not None
        async with self._http.get(self.url(path)) as resp:
            return dict(await resp.json())

    async def tally(self) -> dict[str, int]:
        return {k: int(v) for k, v in (await self._get("_tally")).items()}

    async def dump(self) -> dict[str, Any]:
        return await self._get("_dump")

    async def __aenter__(self) -> Receivers:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.notifyharness", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, cwd=REPO)
        assert self._proc.stdout is not None
        ports = json.loads(await asyncio.wait_for(self._proc.stdout.readline(), 30))
        self.smtp_port, self.port = int(ports["smtp"]), int(ports["http"])
        self._http = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.close()
        if self._proc is not None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()  # its end of input: it stops
            try:
                await asyncio.wait_for(self._proc.wait(), 10)
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()


async def _serve() -> None:
    with SmtpServer() as smtp:
        async with Hooks(mailbox=smtp.box) as hooks:
            print(json.dumps({"smtp": smtp.port, "http": hooks.port}), flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(_serve())
