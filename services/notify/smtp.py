"""E-mail over SMTP through a few kept connections: a message costs MAIL, RCPT and DATA on a connection that is
already open and greeted, instead of a connect, EHLO (and STARTTLS, and a login) and QUIT of its own.

The pool holds at most ``size`` connections to the one SMTP server (so that many sends at once, its line's
whole share); a connection is taken by one send at a time and put back after it, unless the send broke it
(a timeout, a reset, the server closing it), which is then dropped and replaced by a fresh one on the next
send. A connection idle longer than ``IDLE_SECONDS`` is closed rather than reused (servers drop idle ones
after a few minutes); one that the server closed while it was idle fails at its first command, before the
message went, and is replaced once at once.
"""

from __future__ import annotations

import asyncio
import time
from email.header import Header
from email.mime.text import MIMEText
from email.utils import formatdate

import aiosmtplib
import structlog

from services.notify.channels import SENT, Outcome
from shared.notify.admission import Reply
from shared.settings.model import NotifySettings

log = structlog.get_logger("paiq.notify")

IDLE_SECONDS = 30.0


def email_bytes(settings: NotifySettings, to: str, subject: str, text: str, *, delivery_id: str,
                event_id: str) -> bytes:
    """The message as sent: plain text in UTF-8, its ``Message-ID`` the delivery's id (the same on every try: a
    receiver may drop a repeat). Built with the compat32 classes: the default policy's header objects cost
    eight times as much, and these headers are plain."""
    msg = MIMEText(text, "plain", "utf-8")
    msg["From"] = settings.smtp_from
    msg["To"] = to
    msg["Subject"] = subject if subject.isascii() else Header(subject, "utf-8").encode()
    msg["Date"] = formatdate(localtime=False)
    domain = settings.smtp_from.rpartition("@")[2] or "paiq"
    msg["Message-ID"] = f"<{delivery_id}@{domain}>"
    msg["X-Paiq-Delivery"] = delivery_id
    msg["X-Paiq-Event-Id"] = event_id
    return msg.as_bytes()


class SmtpPool:
    def __init__(self, settings: NotifySettings, size: int) -> None:
        self._settings = settings
        self._slots = asyncio.Semaphore(size)
        self._idle: list[tuple[aiosmtplib.SMTP, float]] = []

    async def send(self, to: str, message: bytes) -> Outcome:
        s = self._settings
        if not s.smtp_host:
            return Outcome.failed("no SMTP server is configured (the operator sets PAIQ_SMTP_HOST)", retry=False,
                                  reply=Reply.UNTRIED)
        async with self._slots:
            client, reused = self._take()
            try:
                if client is None:
                    client = await self._connect()
                try:
                    await client.sendmail(s.smtp_from, [to], message, timeout=s.timeout_seconds)
                except aiosmtplib.SMTPServerDisconnected:
                    if not reused:
                        raise
                    self._drop(client)  # closed while idle: nothing went; once more on a fresh connection
                    client = await self._connect()
                    await client.sendmail(s.smtp_from, [to], message, timeout=s.timeout_seconds)
            except aiosmtplib.SMTPRecipientsRefused as e:
                self._keep(client)  # the envelope was reset: the connection serves the next message
                codes = [r.code for r in e.recipients]
                return Outcome.failed(f"the SMTP server refused the address: {e.recipients[0].message}",
                                      retry=all(400 <= c < 500 for c in codes), reply=Reply.ANSWERED)
            except aiosmtplib.SMTPResponseException as e:
                self._keep(client)
                return Outcome.failed(f"the SMTP server answered {e.code} {e.message}", retry=400 <= e.code < 500,
                                      reply=Reply.ANSWERED)
            except (TimeoutError, aiosmtplib.SMTPException, OSError) as e:
                self._drop(client)
                return Outcome.failed(f"could not reach the SMTP server {s.smtp_host}:{s.smtp_port}: {e}", retry=True,
                                      reply=Reply.SILENT)
            self._keep(client)
            return SENT

    def _take(self) -> tuple[aiosmtplib.SMTP | None, bool]:
        now = time.monotonic()
        while self._idle:
            client, since = self._idle.pop()
            if now - since < IDLE_SECONDS and client.is_connected:
                return client, True
            self._drop(client)
        return None, False

    def _keep(self, client: aiosmtplib.SMTP | None) -> None:
        if client is not None and client.is_connected:
            self._idle.append((client, time.monotonic()))

    def _drop(self, client: aiosmtplib.SMTP | None) -> None:
        if client is not None:
            client.close()

    async def _connect(self) -> aiosmtplib.SMTP:
        s = self._settings
        client = aiosmtplib.SMTP(hostname=s.smtp_host, port=s.smtp_port, username=s.smtp_user,
                                 password=s.smtp_password, use_tls=s.smtp_tls == "tls",
                                 start_tls=s.smtp_tls == "starttls", timeout=s.timeout_seconds)
        await client.connect()
        return client

    async def close(self) -> None:
        """QUIT each kept connection (the service stopping)."""
        idle, self._idle = self._idle, []
        for client, _ in idle:
            try:
                await asyncio.wait_for(client.quit(), 2)
            except (TimeoutError, aiosmtplib.SMTPException, OSError):
                client.close()
