"""Benchmark: the worst job bodies submit allows and the oversized ones it refuses, while others are served.

    .venv/bin/python tests/benchmarks/worst_job.py [--sizes 64,256,1024] [--kinds allowed,tasks,...]
                                                   [--rounds 16] [--refused-rounds 20] [--concurrency 4]
                                                   [--linger 2] [--mongo-uri URI] [--keep] [--smoke]

Starts a private in-memory SecantusDB (or uses --mongo-uri) and the four services as separate processes
over RabbitMQ, as the other control-plane benchmarks do (tests/benchmarks/platform_run.py). Every job
asks 1,024 CPUs a task, so none is ever placed: the figures are the submit service's.

After a warm-up job, for each kind and body size (KB) it sends, ``--concurrency`` at a time, bodies of
these kinds (each a fresh job name), the refused kinds first; the jobs of each allowed burst are deleted
after it:

- ``allowed``: the worst job paiq's defaults accept: two roles of 2,245 tasks (about the most whose
  environments fit Linux's exec limits), and ``extras`` filled to the size with as many short strings
  as the value limit allows, plus a chain nested 30 levels deep;
- ``allowed-lists``: the same job with ``extras`` of as many empty lists as the value limit allows (the
  most work per byte a body can ask: every value an object to build, check, serialize and store),
  padded to the size with strings;
- ``allowed-random``: ``allowed`` with random letters and digits for strings (what compresses worst:
  the stored document's configs, packed by the store, stay about three quarters of their size);
- ``tasks``: 100 roles of 10,000 tasks each (the attacker's job), commands padded to the size;
- ``values``: ``extras`` of ``[[],[],...]`` filling the size (the most JSON values a byte buys);
- ``deep``: ``extras`` nested 10,000 levels deep, padded to the size with strings of 1,000 characters;
- ``surrogate``: a lone surrogate (``"\\udfff"``) in ``extras``, padded likewise;
- protocol v2 YAML bodies (``POST /api/v2/jobs``, ``text/yaml``), the ``allowed`` job's roles and chain in
  v2: ``yaml-aliases``, the worst alias-heavy body accepted (one anchored list of 90 strings padded to the
  size, and 99 aliases of it: every value counted expanded, just under the value limit, the stored
  document a hundred times the body's strings, up to what the document limit takes); ``yaml-values``, as
  many one-character plain scalars as the value limit allows, padded with strings; ``yaml-bomb`` (refused):
  a "billion laughs" of nested anchors, nine levels of ten aliases, padded; ``yaml-deep`` (refused): flow
  lists nested 10,000 levels deep, padded.

Before each burst it waits until the platform has digested the ones before (three empty submissions in a
row answered within 50 ms). Meanwhile a separate process times three reads others send, each back to back
in a loop of its own, from the first POST until ``--linger`` seconds after the last answer (the bodies
stored, the scheduler deciding them): ``GET /api/v1`` (the cheap request: the API's own loop), the
newest job's summary ``GET /api/v1/jobs?limit=1`` (a list: it reads the newest jobs, the burst's own) and
the detail ``GET /api/v1/user/U/jobs/J`` of a small job submitted before the bursts and kept (both also
read the queue, for queued jobs' positions); and the submit process's resident memory (VmRSS) is read
before and after each burst (after a second's rest).
Prints a table, then, as its last line, one JSON object: per kind and size the answers, POST and the three
reads' latencies (p50 / p99 / max) and RSS before / after; ``probe_p99_ms_worst`` (the worst p99 of the
cheap request over all bursts), ``list_p99_ms_worst`` and ``detail_p99_ms_worst`` (of the list and the
detail: with ``_allowed`` and ``_refused``, over those bursts), ``rss_growth_mb`` (the submit process's
RSS after the last burst less before the first), ``rss_growth_mb_refused`` (what the bursts of refused
bodies added to it, summed), the submit process's CPU seconds per burst, and ``growth_ratio`` per kind
(POST p50 at the largest size / at the smallest, with the ratio of the sizes beside it).

``--smoke``: every kind once at 32 KB, 2 bodies a burst, 2 in flight, reads timed 0.5 s after (seconds:
that the benchmark runs, not its figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import string
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import aiohttp

from shared.admission.v2.checks import validate_v2_body
from shared.admission.validation import Accepted
from tests.benchmarks.figures import percentile
from tests.benchmarks.platform_run import separate_platform
from tests.benchmarks.submit_to_scheduled import cpu_seconds
from tests.infra import ADMIN_PASSWORD, ADMIN_USER, Platform, unique

IMAGE = "local/busybox:latest"
KINDS = ("allowed", "allowed-lists", "allowed-random", "tasks", "values", "deep", "surrogate", "yaml-aliases",
         "yaml-values", "yaml-bomb", "yaml-deep")
ALLOWED = ("allowed", "allowed-lists", "allowed-random", "yaml-aliases", "yaml-values")
YAML = ("yaml-aliases", "yaml-values", "yaml-bomb", "yaml-deep")  # protocol v2 bodies, to POST /api/v2/jobs
VALUE_BUDGET = 9_500  # JSON values of the allowed body: under paiq's default of 10,000 (PAIQ_MAX_JSON_VALUES)
ALLOWED_ROLES, ALLOWED_TASKS = 2, 2245  # two roles of 2,245 tasks: the largest job whose environment fits
KEPT_JOB = "small-kept"  # the small job whose detail is timed during the bursts


@dataclass(frozen=True)
class Options:
    sizes_kb: tuple[int, ...]
    kinds: tuple[str, ...]
    rounds: int
    refused_rounds: int
    concurrency: int
    linger_s: float
    amqp_url: str
    mongo_uri: str | None
    keep: bool


def parse(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="64,256,1024", help="body sizes in KB, comma-separated (at most 1024)")
    p.add_argument("--rounds", type=int, default=16, help="allowed bodies sent per size")
    p.add_argument("--refused-rounds", type=int, default=20, help="bodies of each refused kind sent per size")
    p.add_argument("--concurrency", type=int, default=4, help="POSTs in flight")
    p.add_argument("--linger", type=float, default=2.0,
                   help="seconds the reads go on being timed after a burst's last answer (its bodies stored)")
    p.add_argument("--kinds", default=",".join(KINDS), help=f"which bodies, comma-separated (of {', '.join(KINDS)})")
    p.add_argument("--amqp-url", default=os.environ.get("PAIQ_TEST_AMQP_URL", "amqp://paiq:PASSWORD@127.0.0.1:5672/"))
    p.add_argument("--mongo-uri", default=os.environ.get("PAIQ_TEST_MONGODB_URI"),
                   help="default: a private in-memory SecantusDB")
    p.add_argument("--keep", action="store_true", help="keep the work directory (service logs)")
    p.add_argument("--smoke", action="store_true", help="a small run: every kind at 32 KB, 2 bodies a burst")
    p.add_argument("--probe", help=argparse.SUPPRESS)  # internal: run as the latency prober of this URL
    a = p.parse_args(argv)
    if a.probe:
        asyncio.run(probe(json.loads(a.probe)))
        sys.exit(0)
    if a.smoke:
        a.sizes, a.rounds, a.refused_rounds, a.concurrency, a.linger = "32", 2, 2, 2, 0.5  # values: refused from ~30 KB
    sizes = tuple(int(s) for s in a.sizes.split(",") if s.strip())
    if not sizes or max(sizes) > 1024 or min(sizes) < 16:
        p.error("--sizes: body sizes of 16-1024 KB")
    kinds = tuple(k for k in KINDS if k in a.kinds.split(","))
    if not kinds or set(a.kinds.split(",")) - set(KINDS):
        p.error(f"--kinds: some of {', '.join(KINDS)}")
    return Options(sizes_kb=sizes, kinds=kinds, rounds=a.rounds, refused_rounds=a.refused_rounds,
                   concurrency=a.concurrency, linger_s=a.linger, amqp_url=a.amqp_url, mongo_uri=a.mongo_uri,
                   keep=a.keep)


# --- the bodies -------------------------------------------------------------------------------------


def _role(name: str, tasks: int, command: str = "true") -> dict[str, Any]:
    return {"name": name, "taskNumber": tasks, "cpuNumber": 1024, "memoryMB": 1024, "command": command}


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _chain(depth: int) -> object:
    """A list nested ``depth`` levels deep (``[[[]]]`` is 3)."""
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _yaml_head(name: str) -> str:
    """A v2 job of the ``allowed`` kind's roles (never placed), ``extras`` to follow, its chain 28 deep."""
    roles = "".join(f"  r{i}: {{instances: {ALLOWED_TASKS}, dockerImage: image, resourcePerInstance: {{cpu: 1024, "
                    f"memoryMB: 1024, gpu: 0}}, commands: ['true']}}\n" for i in range(ALLOWED_ROLES))
    return (f"protocolVersion: 2\nname: {name}\ntype: job\nprerequisites:\n"
            f"  - {{name: image, type: dockerimage, uri: '{IMAGE}'}}\ntaskRoles:\n{roles}"
            f"extras:\n  deep: {'[' * 28}{']' * 28}\n")


def _aliases(head: str, room: int, width: int) -> bytes:
    strings, aliases = 90, 99
    listed = ", ".join(f"x{i:02}{'p' * width}" for i in range(strings))
    text = head + f"  a: &a [{listed}]\n  v: [{', '.join(['*a'] * aliases)}]\n"
    pads = max(0, room - len(text)) // 100_010  # few values: the aliases take nearly all of them
    return (text + f"  pad: [{', '.join(['p' * 100_000] * pads)}]\n").encode()


def _aliases_fitted(head: str, room: int) -> bytes:
    """The alias-heavy body whose expanded document is the largest paiq's document limit accepts (its
    anchored strings as wide as that allows, the body padded to the size with plain strings)."""
    width = max(1, (room - 400) // 90 - 4)
    while width > 1:
        text = _aliases(head, room, width)
        if isinstance(validate_v2_body(text), Accepted):
            return text
        width = width * 9 // 10
    return _aliases(head, room, 1)


def yaml_body(kind: str, size: int, name: str) -> bytes:
    """A protocol v2 body of ``kind`` (see the module's docstring) of about ``size`` bytes."""
    head = _yaml_head(name)
    room = size - len(head) - 64
    if kind == "yaml-aliases":
        return _aliases_fitted(head, room)
    if kind == "yaml-values":
        count = VALUE_BUDGET - 200
        pads = max(0, room - 3 * count) // 10_010
        return (head + f"  v: [{', '.join(['x'] * count)}]\n  pad: [{', '.join(['p' * 10_000] * pads)}]\n").encode()
    if kind == "yaml-bomb":
        levels = "".join(f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 10))
        pads = max(0, room - len(levels)) // 1010
        return (head + "  l0: &l0 [lol]\n" + levels + f"  pad: [{', '.join(['p' * 1000] * pads)}]\n").encode()
    if kind == "yaml-deep":
        depth = 10_000
        pads = max(0, room - 2 * depth) // 1010
        return (head + f"  d: {'[' * depth}{']' * depth}\n  pad: [{', '.join(['p' * 1000] * pads)}]\n").encode()
    raise ValueError(kind)


def body(kind: str, size: int, name: str) -> bytes:
    """A job body of ``kind`` of about ``size`` bytes (never more than 1 MiB)."""
    size = min(size, 1024 * 1024) - 64
    if kind in YAML:
        return yaml_body(kind, size, name)
    head: dict[str, Any] = {"jobName": name, "image": IMAGE, "virtualCluster": "default"}
    if kind in ALLOWED:
        job = {**head, "taskRoles": [_role(f"r{i}", ALLOWED_TASKS) for i in range(ALLOWED_ROLES)],
               "extras": {"deep": _chain(28), "v": [], "pad": []}}
        room = size - len(_dumps(job))
        if kind == "allowed-lists":
            lists = min(VALUE_BUDGET - 100, room // 3)
            job["extras"]["v"] = [[]] * lists
            room -= 3 * lists
            job["extras"]["pad"] = ["p" * 10_000] * (room // 10_003)
            return _dumps(job)
        count = min(VALUE_BUDGET, room // 4)
        width = max(1, room // count - 3)
        if kind == "allowed-random":  # text zlib hardly shrinks (by a quarter): the store packs it least well
            rng = random.Random(name)
            job["extras"]["v"] = ["".join(rng.choices(string.ascii_letters + string.digits, k=width))
                                  for _ in range(count)]
        else:
            job["extras"]["v"] = ["x" * width] * count
        return _dumps(job)
    if kind == "tasks":
        bare = len(_dumps({**head, "taskRoles": [_role(f"r{i}", 10_000, "") for i in range(100)]}))
        pad = max(1, (size - bare) // 100)
        return _dumps({**head, "taskRoles": [_role(f"r{i}", 10_000, "t" * pad) for i in range(100)]})
    job = {**head, "taskRoles": [_role("main", 1)]}
    room = size - len(_dumps(job)) - 40
    if kind == "values":
        return _dumps({**job, "extras": {"v": [[]] * (room // 3)}})
    if kind == "deep":
        depth = 10_000
        text = _dumps({**job, "extras": {"pad": ["p" * 1000] * max(1, (room - 2 * depth) // 1003), "d": "DEEP"}})
        return text.replace(b'"DEEP"', b"[" * depth + b"]" * depth)
    if kind == "surrogate":
        text = _dumps({**job, "extras": {"v": ["p" * 1000] * max(1, room // 1003), "s": "SURROGATE"}})
        return text.replace(b'"SURROGATE"', b'"\\udfff"')
    raise ValueError(kind)


# --- the reads others send, timed from another process -------------------------------------------------


async def probe(urls: dict[str, str]) -> None:
    """Time GET of each of ``urls`` (name -> URL) back to back, each in a loop of its own, until a line
    arrives on stdin; print the latencies (ms) per name as JSON. A non-200 answer is a failure: raised."""
    loop = asyncio.get_running_loop()
    stop = loop.run_in_executor(None, sys.stdin.readline)
    latencies: dict[str, list[float]] = {name: [] for name in urls}

    async def loop_of(s: aiohttp.ClientSession, name: str) -> None:
        while not stop.done():
            t0 = time.perf_counter()
            async with s.get(urls[name]) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"GET {urls[name]} answered {resp.status}")
            latencies[name].append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(0.005)

    async with aiohttp.ClientSession() as s:
        await asyncio.gather(*(loop_of(s, name) for name in urls))
    print(json.dumps(latencies))


class Prober:
    def __init__(self, urls: dict[str, str]) -> None:
        self.urls = urls
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Prober:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--probe", json.dumps(self.urls), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE)
        await asyncio.sleep(0.5)
        return self

    async def stop(self) -> dict[str, list[float]]:
        assert self.proc is not None and self.proc.stdin is not None
        out, _ = await self.proc.communicate(b"stop\n")
        if self.proc.returncode != 0:
            raise RuntimeError(f"the prober failed (exit {self.proc.returncode}); see its error above")
        return {name: [float(x) for x in values] for name, values in json.loads(out).items()}

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0



# --- the run ---------------------------------------------------------------------------------------


@dataclass
class Burst:
    kind: str
    size_kb: int
    body_bytes: int
    answers: dict[str, int]
    post_p50_ms: float
    post_max_ms: float
    probe_p50_ms: float
    probe_p99_ms: float
    probe_max_ms: float
    probes: int
    list_p50_ms: float
    list_p99_ms: float
    list_max_ms: float
    lists: int
    detail_p50_ms: float
    detail_p99_ms: float
    detail_max_ms: float
    details: int
    rss_before_mb: float
    rss_after_mb: float
    submit_cpu_s: float
    message: str


async def token_of(platform: Platform) -> tuple[str, str]:
    user = unique("bench")
    async with aiohttp.ClientSession() as s:
        async with s.post(platform.api + "/api/v1/token",
                          json={"username": ADMIN_USER, "password": ADMIN_PASSWORD}) as r:
            admin = (await r.json())["token"]
        async with s.put(platform.api + "/api/v1/user", headers={"Authorization": f"Bearer {admin}"},
                         json={"username": user, "password": "bench-pass", "admin": False}) as r:
            r.raise_for_status()
        async with s.post(platform.api + "/api/v1/token", json={"username": user, "password": "bench-pass"}) as r:
            return user, (await r.json())["token"]


def probe_urls(platform: Platform, user: str) -> dict[str, str]:
    """The reads timed during a burst: the cheap one, the newest job's summary, the kept small job's detail."""
    return {"api": platform.api + "/api/v1", "list": platform.api + "/api/v1/jobs?limit=1",
            "detail": f"{platform.api}/api/v1/user/{user}/jobs/{KEPT_JOB}"}


async def burst(o: Options, platform: Platform, submit_pid: int, user: str, token: str, kind: str,
                size_kb: int) -> Burst:
    rounds = o.rounds if kind in ALLOWED else o.refused_rounds
    bodies = [body(kind, size_kb * 1024, unique(f"{kind}{size_kb}-")) for _ in range(rounds)]
    url = f"{platform.api}/api/v1/user/{user}/jobs"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    post_url, post_headers = (f"{platform.api}/api/v2/jobs", {**headers, "Content-Type": "text/yaml"}) \
        if kind in YAML else (url, headers)
    times: list[float] = []
    answers: dict[str, int] = {}
    messages: list[str] = []
    gate = asyncio.Semaphore(o.concurrency)
    timeout = aiohttp.ClientTimeout(total=300)

    async def post(s: aiohttp.ClientSession, data: bytes) -> None:
        async with gate:
            t0 = time.perf_counter()
            async with s.post(post_url, data=data, headers=post_headers) as resp:
                text = await resp.text()
            times.append((time.perf_counter() - t0) * 1000)
            answers[str(resp.status)] = answers.get(str(resp.status), 0) + 1
            messages.append(text)

    await settle(url, headers)
    rss_before = rss_mb(submit_pid)
    cpu_before = cpu_seconds(submit_pid)
    async with Prober(probe_urls(platform, user)) as prober, aiohttp.ClientSession(timeout=timeout) as s:
        await asyncio.gather(*(post(s, b) for b in bodies))
        await asyncio.sleep(o.linger_s)
        reads = await prober.stop()
    latencies, lists, details = reads["api"], reads["list"], reads["detail"]
    await asyncio.sleep(1.0)
    rss_after = rss_mb(submit_pid)
    cpu = cpu_seconds(submit_pid) - cpu_before
    return Burst(kind=kind, size_kb=size_kb, body_bytes=len(bodies[0]), answers=answers,
                 post_p50_ms=round(statistics.median(times), 1), post_max_ms=round(max(times), 1),
                 probe_p50_ms=round(percentile(latencies, 0.5), 1), probe_p99_ms=round(percentile(latencies, 0.99), 1),
                 probe_max_ms=round(max(latencies, default=0), 1), probes=len(latencies),
                 list_p50_ms=round(percentile(lists, 0.5), 1), list_p99_ms=round(percentile(lists, 0.99), 1),
                 list_max_ms=round(max(lists, default=0), 1), lists=len(lists),
                 detail_p50_ms=round(percentile(details, 0.5), 1), detail_p99_ms=round(percentile(details, 0.99), 1),
                 detail_max_ms=round(max(details, default=0), 1), details=len(details),
                 rss_before_mb=round(rss_before, 1), rss_after_mb=round(rss_after, 1), submit_cpu_s=round(cpu, 2),
                 message=messages[0][:160])


async def settle(url: str, headers: dict[str, str], limit_s: float = 300) -> None:
    """Wait until the platform has digested earlier bursts (the scheduler and the database read every job
    stored): three empty submissions in a row answered within 50 ms (each a token lookup and a 400)."""
    deadline = time.monotonic() + limit_s
    quick = 0
    async with aiohttp.ClientSession() as s:
        while quick < 3 and time.monotonic() < deadline:
            t0 = time.perf_counter()
            async with s.post(url, data=b"{}", headers=headers) as resp:
                await resp.read()
            quick = quick + 1 if time.perf_counter() - t0 < 0.05 else 0
            await asyncio.sleep(0.2 if quick else 1.0)


async def run(o: Options) -> tuple[list[Burst], float, float]:
    env = {"PAIQ_LOG_LEVEL": "warning", "PAIQ_NODE_TIMEOUT_SECONDS": "3600"}
    async with separate_platform("worst-job", o.mongo_uri, o.amqp_url, keep=o.keep, **env) as (platform, _uri):
        submit = next(p for p in platform.procs if "services.submit" in str(p.args))
        user, token = await token_of(platform)
        await warm_up(platform, user, token)
        await submit_kept_job(platform, user, token)
        start_rss = rss_mb(submit.pid)
        results = []
        # The refused kinds first, on a platform as quiet as an attacker finds one; then the allowed ones,
        # each burst's jobs deleted after it (the database and the scheduler read every stored job).
        for kind in [k for k in o.kinds if k not in ALLOWED] + [k for k in o.kinds if k in ALLOWED]:
            for size in o.sizes_kb:
                results.append(await burst(o, platform, submit.pid, user, token, kind, size))
                r = results[-1]
                print(f"  {kind} {size} KB: {r.answers} POST p50 {r.post_p50_ms} ms, GET p99 {r.probe_p99_ms} ms, "
                      f"list p99 {r.list_p99_ms} ms, detail p99 {r.detail_p99_ms} ms, "
                      f"RSS {r.rss_before_mb} -> {r.rss_after_mb} MB", file=sys.stderr)
                await delete_jobs(platform, user, token)
        return results, start_rss, rss_mb(submit.pid)


async def warm_up(platform: Platform, user: str, token: str) -> None:
    """One small job submitted and deleted: first-use costs (connections, imports) are not measured."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    job = _dumps({"jobName": "warmup", "image": IMAGE, "taskRoles": [_role("w", 1)]})
    async with aiohttp.ClientSession() as s, s.post(f"{platform.api}/api/v1/user/{user}/jobs", headers=headers,
                                                    data=job) as r:
        r.raise_for_status()
    await delete_jobs(platform, user, token)


async def submit_kept_job(platform: Platform, user: str, token: str) -> None:
    """The small job whose detail is timed during the bursts (one task, never placed: it stays queued)."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    job = _dumps({"jobName": KEPT_JOB, "image": IMAGE, "taskRoles": [_role("main", 1)]})
    async with aiohttp.ClientSession() as s, s.post(f"{platform.api}/api/v1/user/{user}/jobs", headers=headers,
                                                    data=job) as r:
        r.raise_for_status()


async def delete_jobs(platform: Platform, user: str, token: str) -> None:
    """Delete every job of ``user`` but the kept one (the accepted ones of a burst), and wait until they are gone."""
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as s:
        for _ in range(600):  # with the token: a page of 1,000 is an anonymous caller's heavy read (throttled)
            async with s.get(f"{platform.api}/api/v1/user/{user}/jobs", headers=headers) as r:
                jobs = [job for job in await r.json() if job["name"] != KEPT_JOB]
            if not jobs:
                return
            for job in jobs:
                async with s.delete(f"{platform.api}/api/v1/user/{user}/jobs/{job['name']}", headers=headers) as r:
                    await r.read()
            await asyncio.sleep(1)


def table(results: list[Burst]) -> str:
    head = ["kind", "KB", "body bytes", "answers", "POST p50 ms", "POST max ms", "GET p50 ms", "GET p99 ms",
            "GET max ms", "GETs", "list p50/p99/max ms", "lists", "detail p50/p99/max ms", "details",
            "submit CPU s", "RSS before MB", "RSS after MB"]
    rows = [[r.kind, str(r.size_kb), f"{r.body_bytes:,}", " ".join(f"{k}x{v}" for k, v in sorted(r.answers.items())),
             f"{r.post_p50_ms:.1f}", f"{r.post_max_ms:.1f}", f"{r.probe_p50_ms:.1f}", f"{r.probe_p99_ms:.1f}",
             f"{r.probe_max_ms:.1f}", str(r.probes),
             f"{r.list_p50_ms:.0f}/{r.list_p99_ms:.0f}/{r.list_max_ms:.0f}", str(r.lists),
             f"{r.detail_p50_ms:.0f}/{r.detail_p99_ms:.0f}/{r.detail_max_ms:.0f}", str(r.details),
             f"{r.submit_cpu_s:.2f}", f"{r.rss_before_mb:.0f}", f"{r.rss_after_mb:.0f}"]
            for r in results]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [head, *rows])


def growth(results: list[Burst]) -> dict[str, dict[str, float]]:
    """Per kind: POST p50 at the largest size over the smallest, beside the ratio of the body sizes."""
    out = {}
    for kind in KINDS:
        rows = sorted((r for r in results if r.kind == kind), key=lambda r: r.size_kb)
        if len(rows) >= 2:
            out[kind] = {"post_p50_ratio": round(rows[-1].post_p50_ms / max(rows[0].post_p50_ms, 0.1), 2),
                         "size_ratio": round(rows[-1].body_bytes / rows[0].body_bytes, 2)}
    return out


def main(argv: list[str] | None = None) -> None:
    o = parse(argv)
    results, start_rss, end_rss = asyncio.run(run(o))
    print(table(results))
    print(f"submit RSS: {start_rss:.0f} MB before the first burst, {end_rss:.0f} MB after the last; "
          f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for r in results:
        if r.kind not in ALLOWED and r.answers.get("400") != sum(r.answers.values()):
            print(f"note: {r.kind} at {r.size_kb} KB was answered {r.answers}: {r.message}")
    print(json.dumps({
        "probe_p99_ms_worst": max(r.probe_p99_ms for r in results),
        "probe_p99_ms_allowed": max((r.probe_p99_ms for r in results if r.kind in ALLOWED), default=None),
        "probe_p99_ms_refused": max((r.probe_p99_ms for r in results if r.kind not in ALLOWED), default=None),
        "list_p99_ms_worst": max(r.list_p99_ms for r in results),
        "list_p99_ms_allowed": max((r.list_p99_ms for r in results if r.kind in ALLOWED), default=None),
        "list_p99_ms_refused": max((r.list_p99_ms for r in results if r.kind not in ALLOWED), default=None),
        "detail_p99_ms_worst": max(r.detail_p99_ms for r in results),
        "detail_p99_ms_allowed": max((r.detail_p99_ms for r in results if r.kind in ALLOWED), default=None),
        "detail_p99_ms_refused": max((r.detail_p99_ms for r in results if r.kind not in ALLOWED), default=None),
        "rss_growth_mb_refused": round(sum(r.rss_after_mb - r.rss_before_mb for r in results
                                           if r.kind not in ALLOWED), 1),
        "rss_start_mb": round(start_rss, 1), "rss_end_mb": round(end_rss, 1),
        "rss_growth_mb": round(end_rss - start_rss, 1),
        "growth_ratio": growth(results),
        "bursts": [asdict(r) for r in results],
    }))


if __name__ == "__main__":
    main()
