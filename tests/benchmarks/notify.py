"""Benchmark: notification delivery latency when many jobs end at once, with some endpoints slow or failing.

    .venv/bin/python tests/benchmarks/notify.py [--jobs 250,500,1000] [--subscribers 200] [--bad-percent 10]
        [--mongo-uri URI] [--smoke]

For each size, a fresh database gets ``--subscribers`` users (half subscribed by e-mail, half by a webhook),
each owning an equal share of ``--jobs`` jobs; ``--bad-percent`` of the e-mail addresses are refused by the
SMTP server for now (451, so they are retried) and as many of the webhooks answer 500 (half of them) or take
10 s, past the 2 s try bound (the other half). Then every job ends at once: one ``job.completed`` per job,
published in one burst on the in-process bus to the real notify service (services/notify: decisions,
delivery records in the MongoDB-wire server, the dispatcher) with a real SMTP server (aiosmtpd) and real
HTTP endpoints (aiohttp) on this machine, in a process of their own (tests.notifyharness.Receivers) so they
do not compete with the notifier for its process. Latency is from each event's time to the message received (the
SMTP server's DATA, the endpoint's answer); the healthy endpoints' p50/p99 are the figures, with the target
(issue 28) p99 under 2 s while the bad ones retry. The growth is the fitted exponent of the time until every
healthy message arrived against jobs.

It prints a table and, as its last line, one JSON object. ``--smoke``: 20 and 40 jobs, 10 subscribers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from services.notify.service import start_notify  # noqa: E402
from shared.bus.memory import MemoryBus  # noqa: E402
from shared.db.embedded import embedded_mongo  # noqa: E402
from shared.db.store import open_store  # noqa: E402
from shared.events import JobCompleted, JobCompletedData  # noqa: E402
from shared.jobconfig.notifykinds import Kind  # noqa: E402
from shared.jobconfig.sealing import new_key  # noqa: E402
from shared.notify.signing import new_secret, seal_secret  # noqa: E402
from shared.notify.subscriptions import Channel, Subscription  # noqa: E402
from shared.ops.logsetup import configure_logging  # noqa: E402
from shared.ops.vitals import Vitals  # noqa: E402
from shared.records import JobState  # noqa: E402
from shared.runtime.relay import start_relay  # noqa: E402
from shared.settings.model import Settings  # noqa: E402
from tests.benchmarks.figures import exponent, percentile  # noqa: E402
from tests.notifyharness import Receivers  # noqa: E402
from tests.unit.factories import make_config, make_job  # noqa: E402

TARGET_P99_S = 2.0


@dataclass
class Result:
    jobs: int
    messages: int
    healthy: int
    p50_s: float
    p99_s: float
    all_healthy_s: float  # from the burst to the last healthy message
    bad_tries: int  # POSTs and SMTP refusals the bad endpoints took meanwhile
    # CPU seconds each process spent from the burst to the last healthy message: where the time went
    cpu_notifier_s: float = 0.0
    cpu_db_s: float = 0.0
    cpu_receivers_s: float = 0.0


def cpu_seconds(pid: int) -> float:
    """A process's user and system CPU time so far (Linux /proc; 0 where unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def database_pid() -> int:
    """The embedded SecantusDB's process: this process's child that is not the receivers' (0: a --mongo-uri)."""
    me = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if text.rsplit(")", 1)[1].split()[1] == me and "secantus" in text.split(")")[0]:
            return int(stat.parent.name)
    return 0


async def one_size(mongo_uri: str, jobs: int, subscribers: int, bad_percent: float) -> Result:
    key = new_key()
    async with Receivers() as rx, AsyncExitStack() as stack:
        settings = Settings.from_env({
            "PAIQ_SECRETS_KEY": key, "PAIQ_SMTP_HOST": "127.0.0.1", "PAIQ_SMTP_PORT": str(rx.smtp_port),
            "PAIQ_SMTP_TLS": "none", "PAIQ_NOTIFY_TIMEOUT_SECONDS": "2", "PAIQ_NOTIFY_RETRY_BASE_MS": "500",
            "PAIQ_NOTIFY_RATE_LIMIT": "0", "PAIQ_NOTIFY_WEBHOOK_ALLOW": "127.0.0.1"})
        store = await stack.enter_async_context(open_store(mongo_uri, f"bench_notify_{uuid.uuid4().hex[:8]}"))
        await store.ensure_indexes()
        bus = MemoryBus()  # the notifier asks for its own prefetch (INTAKE_PREFETCH), as on RabbitMQ
        stack.push_async_callback(bus.close)
        bad_every = max(1, round(100 / bad_percent)) if bad_percent > 0 else 0
        healthy: set[str] = set()  # the users whose address or webhook answers
        users = [f"u{i:04d}" for i in range(subscribers)]
        for i, user in enumerate(users):
            bad = bad_every and i // 2 % bad_every == 0
            sub = Subscription(id=uuid.uuid4().hex[:16], owner=user, channel=Channel.EMAIL,
                               kinds=frozenset({Kind.FAILED}))
            if i % 2 == 0:  # e-mail
                address = f"{'down-' if bad else ''}{user}@example.com"
                await store.users.update_one({"_id": user}, {"$set": {"email": address}}, upsert=True)
            else:
                path = (f"fail/{user}" if i // 2 % 2 else f"slow/10/{user}") if bad else f"ok/{user}"
                sub = sub.model_copy(update={"channel": Channel.WEBHOOK, "url": rx.url(path),
                                             "sealed_secret": seal_secret(new_secret(), key)})
            await store.notifications.add_subscription(sub)
            if not bad:
                healthy.add(user)
        job_ids = []
        for j in range(jobs):
            job = make_job(make_config(jobName=f"job{j:05d}"), user=users[j % subscribers], state=JobState.FAILED)
            await store.insert_job(job)
            job_ids.append((job.id, users[j % subscribers]))
        vitals = Vitals()  # the journal's relay numbers what is stored, and the notifier reads it (as in paiq up)
        await start_relay(stack, store, bus, vitals, queue_prefix="paiq", retention_hours=0)
        await start_notify(stack, settings, store, bus, vitals)
        expected = sum(1 for _, user in job_ids if user in healthy)
        events = [JobCompleted(subject=jid, data=JobCompletedData(job_id=jid, attempt=0, state=JobState.FAILED,
                                                                  exit_code=1, reason="exit 1"))
                  for jid, _ in job_ids]
        sent_at = {e.data.job_id.split("~")[1]: e.time.timestamp() for e in events}  # by job name
        db = database_pid()
        pids = {"notifier": os.getpid(), "db": db, "receivers": rx.pid}
        cpu_before = {k: cpu_seconds(pid) for k, pid in pids.items() if pid}
        burst = time.time()
        await store.journal.record(events, version=1, session=None)  # the burst of changes, as writers store it
        store.journal.touched()
        deadline = time.monotonic() + 300
        while sum((tally := await rx.tally()).values()) < expected:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {sum(tally.values())} of {expected} healthy messages arrived within 300 s")
            await asyncio.sleep(0.2)
        cpu = {k: cpu_seconds(pids[k]) - before for k, before in cpu_before.items()}
        got = await rx.dump()
        latencies = latencies_of(got, sent_at)
        return Result(jobs=jobs, messages=jobs, healthy=expected, p50_s=percentile(latencies, 0.5),
                      p99_s=percentile(latencies, 0.99),
                      all_healthy_s=max(m["at"] for m in [*got["mails"], *got["hooks"]]
                                        if m.get("route", "ok") == "ok") - burst,
                      bad_tries=got["refused"] + sum(n for name, n in got["seen"].items() if name not in healthy),
                      cpu_notifier_s=round(cpu["notifier"], 2), cpu_db_s=round(cpu.get("db", 0.0), 2),
                      cpu_receivers_s=round(cpu["receivers"], 2))


def latencies_of(got: dict[str, Any], sent_at: dict[str, float]) -> list[float]:
    """Each healthy message's time from its event (the job's name is the subject's third word: "paiq: job
    <name> failed ...")."""
    out = [m["at"] - sent_at[str(m["subject"]).split(" ")[2]] for m in got["mails"]]
    return out + [r["at"] - sent_at[str(r["subject"]).split("~")[1]] for r in got["hooks"] if r["route"] == "ok"]


def table(results: list[Result]) -> str:
    lines = [f"{'JOBS':>6} {'HEALTHY MSGS':>12} {'P50 S':>7} {'P99 S':>7} {'ALL HEALTHY S':>13} {'BAD TRIES':>9} "
             f"{'CPU S: NOTIFIER':>15} {'DB':>5} {'RECEIVERS':>9}"]
    for r in results:
        lines.append(f"{r.jobs:>6} {r.healthy:>12} {r.p50_s:>7.2f} {r.p99_s:>7.2f} {r.all_healthy_s:>13.2f} "
                     f"{r.bad_tries:>9} {r.cpu_notifier_s:>15.2f} {r.cpu_db_s:>5.2f} {r.cpu_receivers_s:>9.2f}")
    return "\n".join(lines)


async def run(a: argparse.Namespace) -> list[Result]:
    sizes = [int(s) for s in a.jobs.split(",")]
    results = []
    async with AsyncExitStack() as stack:
        uri = a.mongo_uri or await stack.enter_async_context(embedded_mongo(None))
        for jobs in sizes:
            results.append(await one_size(uri, jobs, a.subscribers, a.bad_percent))
            r = results[-1]
            print(f"  {jobs} jobs: healthy p50 {r.p50_s:.2f} s, p99 {r.p99_s:.2f} s", file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", default="250,500,1000", help="jobs ending in one burst, comma-separated sizes")
    p.add_argument("--subscribers", type=int, default=200, help="users, half by e-mail and half by webhook")
    p.add_argument("--bad-percent", type=float, default=10, help="endpoints (of each channel) slow or failing")
    p.add_argument("--mongo-uri", default=os.environ.get("PAIQ_TEST_MONGODB_URI"),
                   help="a MongoDB-wire server (default: a private in-memory SecantusDB)")
    p.add_argument("--smoke", action="store_true", help="20 and 40 jobs, 10 subscribers")
    a = p.parse_args(argv)
    if a.smoke:
        a.jobs, a.subscribers = "20,40", 10
    configure_logging("error", service="notify-bench")  # a notifier's warnings of the bad endpoints' tries
    results = asyncio.run(run(a))
    print(table(results))
    largest = results[-1]
    figures: dict[str, Any] = {
        "benchmark": "notify", "subscribers": a.subscribers, "bad_percent": a.bad_percent,
        "sizes": [r.__dict__ for r in results],
        "healthy_p99_s": round(largest.p99_s, 3), "healthy_p50_s": round(largest.p50_s, 3),
        "target_p99_s": TARGET_P99_S, "meets_target": largest.p99_s < TARGET_P99_S,
        "growth_exponent": round(exponent([r.jobs for r in results], [r.all_healthy_s for r in results]), 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
