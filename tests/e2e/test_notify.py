"""Notifications end to end, in both shapes (``paiq up``, and the services as processes over RabbitMQ with
``paiq service notify`` beside them): users subscribe through the API (an e-mail address, webhooks), run real
jobs, and a real SMTP server (aiosmtpd) and real HTTP endpoints receive what they are told. Checked: exactly one
"running" and one "failed" message per channel for a job with ``jobStatusChangeNotification`` {running,
failed}, signed, with the exit code and reason; an endpoint answering 500 three times then 200 receives each
message once; a hanging endpoint does not delay another user's; (separate shape) the notifier killed -9
while a webhook hangs: after its restart nothing is lost and nothing is sent twice; and (paiq up) the portal's
Notifications page in headless Chromium: an address set, a webhook added (its key shown once) and listed
without it, the deliveries shown, the webhook removed, no CSP violation. The endpoints listen on 127.0.0.1,
which the platform allows (PAIQ_NOTIFY_WEBHOOK_ALLOW); a metadata-address webhook is refused with a 400."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import docker
import pytest

from services.cli.client import ApiCallError, PaiqClient, paiq_client
from shared.db.embedded import free_port
from tests.e2e.browser import chromium
from tests.e2e.conftest import job_config, logged_in
from tests.e2e.test_portal import CSP_WATCH
from tests.infra import (
    ADMIN_PASSWORD,
    ADMIN_USER,
    Platform,
    start_extra_process,
    start_platform,
    stop_platform,
    unique,
    wait_answering,
    wait_final,
)
from tests.notifyharness import Hooks, SmtpServer, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
SWITCH = {"running": True, "failed": True}


@pytest.fixture(scope="module")
def smtp() -> Iterator[SmtpServer]:
    with SmtpServer() as server:
        yield server


@pytest.fixture(scope="module")
async def hooks() -> AsyncIterator[Hooks]:
    async with Hooks() as h:
        yield h


@pytest.fixture(scope="module", params=["all-in-one", "separate"])
def notify_platform(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, mongo_uri: str,
                    amqp_url: str, docker_client: docker.DockerClient, smtp: SmtpServer) -> Iterator[Platform]:
    shape = str(request.param)
    env = {"PAIQ_SMTP_HOST": "127.0.0.1", "PAIQ_SMTP_PORT": str(smtp.port), "PAIQ_SMTP_TLS": "none",
           "PAIQ_SMTP_FROM": "paiq@e2e.example", "PAIQ_NOTIFY_RETRY_BASE_MS": "200",
           "PAIQ_NOTIFY_TIMEOUT_SECONDS": "3", "PAIQ_NOTIFY_WEBHOOK_ALLOW": "127.0.0.1"}
    p = start_platform(shape, tmp_path_factory.mktemp(f"notify-{shape}"), mongo_uri=mongo_uri, amqp_url=amqp_url,
                       **env)
    try:
        if shape == "separate":
            # answering before the first test's job: a notifier's first start tells the changes after it, not before
            notifier = start_notifier(p)
            wait_answering(p.ops["notify"] + "/healthz", notifier)
        yield p
    finally:
        stop_platform(p, docker_client)


def start_notifier(p: Platform) -> subprocess.Popen[bytes]:
    port = free_port()
    proc = start_extra_process(p, f"notify-{port}", "services.notify", PAIQ_NOTIFY_OPS_PORT=str(port))
    p.ops["notify"] = f"http://127.0.0.1:{port}"
    return proc


@asynccontextmanager
async def admin_of(p: Platform) -> AsyncIterator[PaiqClient]:
    async with paiq_client(p.api) as anonymous:
        token = (await anonymous.login(ADMIN_USER, ADMIN_PASSWORD))["token"]
        yield anonymous.with_token(token)


async def call(client: PaiqClient, method: str, path: str, body: Any = None) -> dict[str, Any]:
    answer, _ = await client._call(method, "/api/v1/notifications" + path, json=body)
    return dict(answer or {})


async def webhook(client: PaiqClient, hooks: Hooks, path: str, kinds: list[str], **extra: Any) -> str:
    added = await call(client, "POST", "/subscriptions", {"channel": "webhook", "url": hooks.url(path),
                                                          "kinds": kinds, **extra})
    hooks.secrets[path.rsplit("/", 1)[-1]] = added["secret"]
    return str(added["subscription"]["id"])


async def run_job(client: PaiqClient, user: str, command: str, **extra: Any) -> dict[str, Any]:
    name = unique("n")
    await client.submit(user, json.dumps(job_config(name, command=command, **extra)).encode())
    detail, _ = await wait_final(client, user, name)
    return detail


def _kinds(received: list[Any]) -> list[str]:
    return sorted(r.body["data"]["kind"] for r in received)


async def test_a_subscribed_user_hears_running_and_failed_once_per_channel(
        notify_platform: Platform, smtp: SmtpServer, hooks: Hooks) -> None:
    async with admin_of(notify_platform) as admin:
        user = unique("u")
        alice = await logged_in(admin, user)
        await call(alice, "PUT", "/email", {"email": f"{user}@example.com"})
        await call(alice, "POST", "/subscriptions", {"channel": "email", "kinds": ["succeeded"]})
        tag = notify_platform.shape
        await webhook(alice, hooks, f"ok/{tag}-a", ["succeeded"])
        await webhook(alice, hooks, f"flaky/3/{tag}-f", ["succeeded"], format="chat")
        listed = await call(alice, "GET", "/subscriptions")
        assert len(listed["subscriptions"]) == 3 and "secret" not in json.dumps(listed)
        assert listed["email"] == f"{user}@example.com"

        detail = await run_job(alice, user, "sleep 2; echo bye; exit 3",
                               extras={"jobStatusChangeNotification": SWITCH})
        assert detail["jobStatus"]["state"] == "FAILED"
        await wait_until(lambda: len(smtp.box.to(f"{user}@example.com")) >= 2
                         and len(hooks.received[f"{tag}-a"]) >= 2 and len(hooks.received[f"{tag}-f"]) >= 2, 30,
                         "running and failed on every channel")
        await asyncio.sleep(2)  # anything sent twice would have arrived by now

        mails = smtp.box.to(f"{user}@example.com")
        subjects = sorted(m.message["Subject"] for m in mails)
        assert len(subjects) == 2 and subjects[0].endswith("failed with exit code 3")
        assert subjects[1].endswith("is running")
        failed_mail = next(m for m in mails if "failed" in m.message["Subject"]).message.get_content()
        assert "exit code 3" in failed_mail and "Reason:" in failed_mail
        assert _kinds(hooks.received[f"{tag}-a"]) == ["failed", "running"]
        assert all(r.signed for r in hooks.received[f"{tag}-a"] + hooks.received[f"{tag}-f"])
        failed_event = next(r.body for r in hooks.received[f"{tag}-a"] if r.body["data"]["kind"] == "failed")
        assert failed_event["data"]["exitCode"] == 3 and failed_event["data"]["reason"]
        chat = sorted(r.body["text"] for r in hooks.received[f"{tag}-f"])
        assert len(chat) == 2 and hooks.seen[f"{tag}-f"] == 5  # three 500s, then each message once
        deliveries = (await call(alice, "GET", "/deliveries"))["deliveries"]
        assert sorted((d["channel"], d["kind"], d["state"]) for d in deliveries) == sorted(
            [(c, k, "sent") for c in ("email", "webhook", "webhook") for k in ("running", "failed")])


async def test_a_dead_endpoint_does_not_delay_another_users(notify_platform: Platform, hooks: Hooks) -> None:
    async with admin_of(notify_platform) as admin:
        tag = notify_platform.shape
        bob_name, carol_name = unique("b"), unique("c")
        bob, carol = await logged_in(admin, bob_name), await logged_in(admin, carol_name)
        await webhook(bob, hooks, f"hang/{tag}-dead", ["failed"])
        await webhook(carol, hooks, f"ok/{tag}-carol", ["failed"])
        bob_jobs = [asyncio.create_task(run_job(bob, bob_name, "exit 1")) for _ in range(3)]
        await asyncio.sleep(1)
        detail = await run_job(carol, carol_name, "exit 1")
        await asyncio.gather(*bob_jobs)
        await wait_until(lambda: len(hooks.received[f"{tag}-carol"]) == 1, 10, "carol's webhook told")
        lag = hooks.received[f"{tag}-carol"][0].at - detail["jobStatus"]["completedTime"] / 1000
        assert lag < 3, f"carol heard {lag:.1f} s after her job ended, behind bob's dead endpoint"
        assert hooks.seen[f"{tag}-dead"] >= 1


# paiq up is one process: killing its notifier kills the platform, so this runs in the separate shape alone.
@pytest.mark.parametrize("notify_platform", ["separate"], indirect=True)
async def test_the_notifier_killed_mid_delivery_loses_and_repeats_nothing(
        notify_platform: Platform, smtp: SmtpServer, hooks: Hooks) -> None:
    async with admin_of(notify_platform) as admin:
        user = unique("k")
        client = await logged_in(admin, user)
        await call(client, "PUT", "/email", {"email": f"{user}@example.com"})
        await webhook(client, hooks, f"hang-once/{user}", ["failed"])
        notifier = next(p for p in notify_platform.procs if "notify" in " ".join(map(str, p.args)))
        await run_job(client, user, "exit 2", extras={"jobStatusChangeNotification": {"failed": True}})
        await wait_until(lambda: hooks.seen[user] >= 1 and len(smtp.box.to(f"{user}@example.com")) >= 1, 20,
                         "the webhook hanging on its first try, the mail sent")
        for _ in range(50):  # the mail recorded sent (its outcome is written a moment after the server took it)
            if any(d["channel"] == "email" and d["state"] == "sent"
                   for d in (await call(client, "GET", "/deliveries"))["deliveries"]):
                break
            await asyncio.sleep(0.1)
        notifier.send_signal(signal.SIGKILL)
        notifier.wait(10)
        notify_platform.procs.remove(notifier)
        killed_at = time.time()
        start_notifier(notify_platform)
        await wait_until(lambda: len(hooks.received[user]) >= 1, 40, "the webhook's message after the restart")
        await asyncio.sleep(2)
        assert len(hooks.received[user]) == 1 and hooks.received[user][0].signed
        assert hooks.received[user][0].at > killed_at
        assert len(smtp.box.to(f"{user}@example.com")) == 1  # sent before the kill, not again after it
        [d] = [d for d in (await call(client, "GET", "/deliveries"))["deliveries"] if d["channel"] == "webhook"]
        assert d["state"] == "sent"


@pytest.mark.parametrize("notify_platform", ["all-in-one"], indirect=True)
async def test_the_portal_sets_an_address_adds_lists_and_removes_a_webhook_and_shows_deliveries(
        notify_platform: Platform, hooks: Hooks) -> None:
    async with admin_of(notify_platform) as admin:
        user = unique("p")
        client = await logged_in(admin, user)
        token = (await admin.with_token(None).login(user, "secret-pass"))["token"]
        with pytest.raises(ApiCallError, match=r"url: 169\.254\.169\.254 is a link-local address"):
            await call(client, "POST", "/subscriptions", {"channel": "webhook", "kinds": ["failed"],
                                                          "url": "http://169.254.169.254/latest/meta-data/"})
        async with chromium() as page:
            await page.call("Page.addScriptToEvaluateOnNewDocument", source=CSP_WATCH)
            await page.goto(f"{notify_platform.api}/#/notify?token={token}")
            await page.wait("!!document.querySelector('#notify-email-form')", "the notifications page")
            await page.type("#notify-email", f"{user}@example.com")
            await page.click("#notify-email-form button[type=submit]")
            # The field holds the typed address before the save answers: wait for the saved one (seen once, in a
            # full run, read before the PUT was done), then for the page drawn again.
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if (saved := (await call(client, "GET", "/subscriptions"))["email"]) is not None:
                    break
                await asyncio.sleep(0.1)
            assert saved == f"{user}@example.com"
            await page.wait(f"document.querySelector('#notify-email').value === {json.dumps(user + '@example.com')}"
                            " && !!document.querySelector('#notify-subscriptions, #notify-subs + p')",
                            "the page drawn again")

            await page.eval("(() => { const c = document.querySelector('#notify-channel'); c.value = 'webhook';"
                            " c.dispatchEvent(new Event('change')); })()")
            await page.type("#notify-url", hooks.url(f"ok/{user}"))
            await page.click("#notify-add-form button[type=submit]")
            secret = str(await page.wait("document.querySelector('#notify-secret') && "
                                         "document.querySelector('#notify-secret').innerText", "the key shown once"))
            hooks.secrets[user] = secret
            listed = "[...document.querySelectorAll('#notify-subscriptions tr[data-subscription]')]"
            await page.wait(f"{listed}.length === 1", "the webhook listed")
            row_text = str(await page.eval(f"{listed}[0].innerText"))
            assert hooks.url(f"ok/{user}") in row_text and secret not in row_text
            assert secret not in str(await call(client, "GET", "/subscriptions"))

            await run_job(client, user, "exit 4")  # failed: one of the page's default kinds
            await wait_until(lambda: len(hooks.received[user]) == 1, 20, "the webhook told of the failed job")
            assert hooks.received[user][0].signed  # with the key the page showed
            for _ in range(50):  # its outcome is recorded a moment after the message went
                if any(d["state"] == "sent" for d in (await call(client, "GET", "/deliveries"))["deliveries"]):
                    break
                await asyncio.sleep(0.1)
            await page.eval("location.reload()")  # the page reads the deliveries when drawn
            sent = "document.querySelector('#notify-deliveries tr[data-state=sent]')"
            await page.wait(f"!!{sent}", "the delivery shown as sent")
            assert "webhook" in str(await page.eval(f"{sent}.innerText"))
            await page.wait("!!document.querySelector('#notify-subscriptions tr[data-subscription]')", "the list")

            await page.click("#notify-subscriptions tr[data-subscription] button")
            await page.wait("!document.querySelector('#notify-subscriptions')", "the webhook removed")
            assert (await call(client, "GET", "/subscriptions"))["subscriptions"] == []
            assert await page.eval("window.cspViolations") == [] and page.errors == []
