"""A notification consumer of paiq's event stream: POSTs chosen events to a webhook, HMAC-signed.

Standalone on purpose: it needs only aio-pika and aiohttp, not paiq's code, and shows what any consumer
does: declare a queue of its own, bind it to the routing keys it wants on the `paiq.events` topic
exchange, and acknowledge a message once it has been handled.

    python examples/webhook_notifier.py --url https://hooks.example/paiq --secret-env WEBHOOK_SECRET \\
        --amqp-url amqp://paiq:PASSWORD@127.0.0.1:5672/ --events job.completed job.retrying

Each POST carries the CloudEvent as its body (`Content-Type: application/cloudevents+json`) and
`X-Paiq-Signature: sha256=<hex HMAC-SHA256 of the body with the shared secret>`; the receiver
recomputes it and compares in constant time. A POST that fails is retried with backoff; the message
is acknowledged only after the webhook answered 2xx, so nothing is lost across restarts.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import logging
import os
import signal

import aio_pika
import aiohttp

log = logging.getLogger("webhook-notifier")


def signature(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


async def deliver(session: aiohttp.ClientSession, url: str, secret: bytes, body: bytes, attempts: int = 5) -> bool:
    headers = {"Content-Type": "application/cloudevents+json", "X-Paiq-Signature": signature(secret, body)}
    for attempt in range(1, attempts + 1):
        try:
            async with session.post(url, data=body, headers=headers) as resp:
                if 200 <= resp.status < 300:
                    return True
                log.warning("webhook answered %s (attempt %d)", resp.status, attempt)
        except aiohttp.ClientError as e:
            log.warning("webhook unreachable: %s (attempt %d)", e, attempt)
        await asyncio.sleep(min(0.5 * 2 ** attempt, 30))
    return False


async def run(args: argparse.Namespace) -> None:
    secret = os.environ[args.secret_env].encode()
    connection = await aio_pika.connect_robust(args.amqp_url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with connection, aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=10)
        exchange = await channel.declare_exchange(args.exchange, aio_pika.ExchangeType.TOPIC, durable=True)
        queue = await channel.declare_queue(args.queue, durable=True)
        for key in args.events:
            await queue.bind(exchange, routing_key=key)

        async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            event = json.loads(message.body)
            if await deliver(session, args.url, secret, message.body):
                log.info("delivered %s of %s", event.get("type"), event.get("subject"))
                await message.ack()
            else:
                await message.nack(requeue=True)  # the webhook is down: keep it for later

        await queue.consume(on_message)
        log.info("forwarding %s from %s to %s", ", ".join(args.events), args.exchange, args.url)
        print("ready", flush=True)
        await stop.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="the webhook to POST events to")
    p.add_argument("--secret-env", default="WEBHOOK_SECRET", help="environment variable holding the HMAC secret")
    p.add_argument("--amqp-url", default=os.environ.get("PAIQ_AMQP_URL", "amqp://paiq:PASSWORD@127.0.0.1:5672/"))
    p.add_argument("--exchange", default=os.environ.get("PAIQ_EXCHANGE", "paiq.events"))
    p.add_argument("--queue", default="webhook-notifier", help="this consumer's own durable queue")
    p.add_argument("--events", nargs="+", default=["job.completed"], help="routing keys to forward")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
