"""The two ways out: email over SMTP (aiosmtplib) and a webhook's POST (aiohttp). Each try ends as an
:class:`Outcome`: sent, worth another try (a timeout, a refused connection, a 5xx, an SMTP 4xx), or not."""

from __future__ import annotations

from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate

import aiohttp
import aiosmtplib

from shared.notify.schedule import retryable_status
from shared.notify.signing import SIGNATURE_HEADER, signature
from shared.settings.model import NotifySettings

MAX_ERROR = 300  # characters of an error kept on the delivery (the user sees it)


@dataclass(frozen=True)
class Outcome:
    sent: bool
    retry: bool = False
    error: str = ""

    @classmethod
    def failed(cls, error: str, *, retry: bool) -> Outcome:
        return cls(sent=False, retry=retry, error=error[:MAX_ERROR])


SENT = Outcome(sent=True)


async def post_webhook(session: aiohttp.ClientSession, url: str, body: bytes, *, secret: str, content_type: str,
                       delivery_id: str, event_id: str, timeout_s: float) -> Outcome:
    headers = {"Content-Type": content_type, SIGNATURE_HEADER: signature(secret, body),
               "X-Paiq-Delivery": delivery_id, "X-Paiq-Event-Id": event_id, "User-Agent": "paiq-notify"}
    try:
        async with session.post(url, data=body, headers=headers, allow_redirects=False,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if 200 <= resp.status < 300:
                return SENT
            return Outcome.failed(f"the webhook answered {resp.status}", retry=retryable_status(resp.status))
    except TimeoutError:
        return Outcome.failed(f"the webhook did not answer within {timeout_s:g} s", retry=True)
    except aiohttp.ClientConnectorError as e:
        return Outcome.failed(f"could not connect to the webhook: {e.os_error or e}", retry=True)
    except (aiohttp.ClientError, OSError) as e:
        return Outcome.failed(f"the webhook's answer was cut off: {e}", retry=True)


def email_message(settings: NotifySettings, to: str, subject: str, text: str, *, delivery_id: str,
                  event_id: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = settings.smtp_from
    msg["To"] = to
    msg["Subject"] = subject
    msg["Date"] = formatdate(localtime=False)
    domain = settings.smtp_from.rpartition("@")[2] or "paiq"
    msg["Message-ID"] = f"<{delivery_id}@{domain}>"  # the same on every try: a receiver may drop a repeat
    msg["X-Paiq-Delivery"] = delivery_id
    msg["X-Paiq-Event-Id"] = event_id
    msg.set_content(text)
    return msg


async def send_email(settings: NotifySettings, msg: EmailMessage) -> Outcome:
    if not settings.smtp_host:
        return Outcome.failed("no SMTP server is configured (the operator sets PAIQ_SMTP_HOST)", retry=False)
    try:
        await aiosmtplib.send(msg, hostname=settings.smtp_host, port=settings.smtp_port,
                              username=settings.smtp_user, password=settings.smtp_password,
                              use_tls=settings.smtp_tls == "tls", start_tls=settings.smtp_tls == "starttls",
                              timeout=settings.timeout_seconds)
    except aiosmtplib.SMTPRecipientsRefused as e:
        codes = [r.code for r in e.recipients]
        return Outcome.failed(f"the SMTP server refused the address: {e.recipients[0].message}",
                              retry=all(400 <= c < 500 for c in codes))
    except aiosmtplib.SMTPResponseException as e:
        return Outcome.failed(f"the SMTP server answered {e.code} {e.message}", retry=400 <= e.code < 500)
    except (TimeoutError, aiosmtplib.SMTPException, OSError) as e:
        return Outcome.failed(f"could not reach the SMTP server {settings.smtp_host}:{settings.smtp_port}: {e}",
                              retry=True)
    return SENT
