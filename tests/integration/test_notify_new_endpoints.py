"""New endpoints that never answer do not starve anyone (the tester's scenario of issue 36, made small): two users
with many new webhooks to endpoints that hang, one job each, then another user's messages to an endpoint that
has answered before and a third user's to a new one. With the pool at 8 and tries bounded by 3 s, the healthy
messages arrive at once, not when the hanging tries time out: a new endpoint gets one try until it answers, and
new endpoints together hold at most their share of the pool, one user's at most theirs of that."""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack

import pytest

from shared.jobconfig.notifykinds import Kind
from shared.notify.admission import Limits
from tests.infra import unique
from tests.integration.test_notify_delivery import _notifier, failed, publish
from tests.notifyharness import Hooks, SmtpServer, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

POOL, TIMEOUT_S, DEAD_EACH = 8, 3, 12


async def test_new_dead_endpoints_hold_a_bounded_share_and_healthy_messages_go_at_once(mongo_uri: str) -> None:
    with SmtpServer() as smtp:
        async with Hooks() as hooks, AsyncExitStack() as stack:
            n = await _notifier(stack, mongo_uri, hooks, smtp.port, PAIQ_NOTIFY_CONCURRENCY=str(POOL),
                                PAIQ_NOTIFY_TIMEOUT_SECONDS=str(TIMEOUT_S), PAIQ_NOTIFY_RETRY_BASE_MS="60000")
            bad, known, fresh = [unique("bad") for _ in range(2)], unique("known"), unique("fresh")
            for user in bad:
                for i in range(DEAD_EACH):
                    await n.webhook(user, f"hang/{user}-{i}", {Kind.FAILED})
            await n.webhook(known, f"ok/{known}", {Kind.FAILED})
            await n.webhook(fresh, f"ok/{fresh}", {Kind.FAILED})
            await publish(n, failed(await n.job(known)))  # the known endpoint has answered once
            await wait_until(lambda: len(hooks.received[known]) == 1, 5, "the known endpoint's first message")

            await publish(n, *[failed(await n.job(user)) for user in bad])
            hanging = lambda: sum(seen for name, seen in hooks.seen.items() if name.startswith("bad"))  # noqa: E731
            await wait_until(lambda: hanging() >= 2, 5, "the new dead endpoints tried")
            await asyncio.sleep(0.3)  # time for more of them to take slots, were they allowed to
            assert hanging() <= Limits(pool=POOL, endpoint=2, smtp=8).new_share, dict(hooks.seen)

            sent_at = time.time()
            jobs = [await n.job(user) for user in (known, fresh) for _ in range(3)]
            await publish(n, *(failed(j) for j in jobs))
            await wait_until(lambda: len(hooks.received[known]) == 4 and len(hooks.received[fresh]) == 3,
                             TIMEOUT_S * 2, "the healthy users' six messages")
            took = max(r.at for name in (known, fresh) for r in hooks.received[name]) - sent_at
            assert took < TIMEOUT_S / 2, f"the healthy messages took {took:.2f} s: they waited for the hanging tries"
