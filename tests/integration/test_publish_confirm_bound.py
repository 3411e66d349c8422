"""docs, Reliability (the broker restarting): "a publish waits at most 10 s for the broker's confirm and
then fails".

The bus talks to the real RabbitMQ through a proxy that can stop forwarding (a broker that hangs without
closing the connection, which a stopped broker never shows a client): a publish made while it is frozen
fails with BusError after the docs' 10 s, neither sooner nor much later.
"""

from __future__ import annotations

import time
import urllib.parse

import pytest

from shared.bus.amqp import open_amqp_bus
from shared.errors import BusError
from shared.events import NodeRegistered, NodeRegisteredData
from tests.chaos.proxy import FreezingProxy
from tests.infra import unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

README_CONFIRM_SECONDS = 10


def through(url: str, port: int) -> str:
    parts = urllib.parse.urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{credentials}@127.0.0.1:{port}"))


async def test_a_publish_the_broker_never_confirms_fails_after_10_s(amqp_url: str) -> None:
    proxy = FreezingProxy(urllib.parse.urlsplit(amqp_url).port or 5672)
    await proxy.start()
    try:
        async with open_amqp_bus(through(amqp_url, proxy.port), unique("paiq.confirm."), unique("confirm")) as bus:
            event = NodeRegistered(data=NodeRegisteredData(node_id=unique("confirm-")))
            started = time.monotonic()
            await bus.publish([event])
            assert time.monotonic() - started < 5, "a confirm from a broker that answers comes at once"

            proxy.freeze()
            started = time.monotonic()
            with pytest.raises(BusError, match="was not confirmed"):
                await bus.publish([event])
            waited = time.monotonic() - started
            proxy.thaw()
            assert README_CONFIRM_SECONDS - 0.5 <= waited <= README_CONFIRM_SECONDS + 3, waited
    finally:
        proxy.thaw()
        await proxy.stop()
