"""What profiling costs the launcher: CPU time of its sampling rounds as running tasks grow.

    python tests/benchmarks/profiling.py [--tasks 10,25,50] [--rounds 6] [--interval 10] [--smoke]

Starts busybox containers labelled as one node's running tasks (``sleep``), then, at each size, runs the
launcher's real sampler (services/launcher/profiling/sampling.Sampler: one listing, every container's stats from the
engine side by side, one bulk write of the profiles to a MongoDB-wire server) for a priming round and
``--rounds`` measured ones. The cost is this process's CPU time (all its threads: the stats pool, the
driver, the event loop) per round; at the sampling interval (PAIQ_PROFILE_SECONDS, default 10) that is the
share of a core the launcher spends on profiling. The database runs in its own process and is not
counted (it is not the launcher's). The target (issue 15): 50 tasks under 5% of a core.

It prints a table and, as its last line, one JSON object: per size the CPU ms per round, the wall time
per round and the percent of a core at the interval, and the exponent of CPU per round against tasks.

``--smoke``: 2 and 4 tasks, one measured round each (seconds: that the benchmark runs, not its figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import docker  # noqa: E402

from services.launcher.deps import LauncherDeps  # noqa: E402
from services.launcher.engine.docker_driver import DockerDriver  # noqa: E402
from services.launcher.engine.tasklabels import TaskLabels  # noqa: E402
from services.launcher.profiling.sampling import Sampler  # noqa: E402
from shared.bus.memory import MemoryBus  # noqa: E402
from shared.db.embedded import embedded_mongo  # noqa: E402
from shared.db.logs import LogStore  # noqa: E402
from shared.db.store import open_store  # noqa: E402
from shared.settings.model import Settings  # noqa: E402
from tests.benchmarks.figures import exponent  # noqa: E402

TARGET_PERCENT = 5.0
TARGET_TASKS = 50


def start_containers(client: docker.DockerClient, node: str, first: int, count: int) -> list[str]:
    ids = []
    for i in range(first, first + count):
        labels = TaskLabels(job=f"bench~{node}", attempt=0, role="main", index=i, user="bench", vc="default",
                            node=node, memory_mb=64, cpus=1).to_labels()
        c = client.containers.run("local/busybox:latest", ["sleep", "3600"], detach=True, labels=labels,
                                  name=f"{node}-{i}", network_mode="none", mem_limit="64m")
        ids.append(str(c.id))
    return ids


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    client = docker.from_env()
    node = f"bench-{uuid.uuid4().hex[:6]}"
    sizes = sorted(int(s) for s in args.tasks.split(","))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with AsyncExitStack() as stack:
            uri = args.mongodb_uri or await stack.enter_async_context(embedded_mongo(None))
            settings = Settings.from_env({"PAIQ_NODE_ID": node, "PAIQ_DATA_DIR": tmp, "PAIQ_MONGODB_URI": uri,
                                          "PAIQ_MONGODB_DATABASE": f"bench_{node.replace('-', '_')}",
                                          "PAIQ_PROFILE_SECONDS": str(args.interval)})
            store = await stack.enter_async_context(open_store(uri, settings.database))
            await store.profiles.ensure_indexes()
            driver = DockerDriver.from_url(None)
            stack.push_async_callback(driver.close)
            deps = LauncherDeps(settings=settings, store=store, bus=MemoryBus(), driver=driver,
                                logs=LogStore(store.jobs.database))
            running = 0
            try:
                for size in sizes:
                    await asyncio.to_thread(start_containers, client, node, running, size - running)
                    running = size
                    sampler = Sampler(deps, None, store.profiles)
                    await sampler.round()  # primes every task (its first reading) and loads nothing
                    await sampler.round()  # inserts every profile
                    cpu, wall = [], []
                    for _ in range(args.rounds):
                        c0, w0 = time.process_time(), time.perf_counter()
                        await sampler.round()
                        cpu.append(time.process_time() - c0)
                        wall.append(time.perf_counter() - w0)
                    per_round = statistics.median(cpu)
                    rows.append({"tasks": size, "sampled": sampler.tracked,
                                 "cpu_ms_per_round": round(per_round * 1000, 1),
                                 "wall_s_per_round": round(statistics.median(wall), 2),
                                 "percent_of_core": round(100 * per_round / args.interval, 2)})
            finally:
                for c in client.api.containers(all=True, filters={"label": f"paiq.node={node}"}):
                    client.api.remove_container(c["Id"], force=True)
    at_target = next((r for r in rows if r["tasks"] == TARGET_TASKS), rows[-1])
    return {"interval_s": args.interval, "rounds": args.rounds, "sizes": rows,
            "cpu_exponent": round(exponent([r["tasks"] for r in rows], [r["cpu_ms_per_round"] for r in rows]), 2)
            if len(rows) > 1 else None,
            "target": f"{TARGET_TASKS} tasks under {TARGET_PERCENT}% of a core",
            "at_target_tasks": at_target["tasks"], "at_target_percent": at_target["percent_of_core"],
            "within_target": at_target["percent_of_core"] < TARGET_PERCENT}


def table(figures: dict[str, Any]) -> str:
    lines = [f"profiling: the launcher's sampling rounds ({figures['rounds']} measured per size; interval "
             f"{figures['interval_s']} s)",
             f"{'tasks':>6} {'sampled':>8} {'CPU ms/round':>13} {'wall s/round':>13} {'% of a core':>12}"]
    lines += [f"{r['tasks']:>6} {r['sampled']:>8} {r['cpu_ms_per_round']:>13.1f} {r['wall_s_per_round']:>13.2f} "
              f"{r['percent_of_core']:>12.2f}" for r in figures["sizes"]]
    lines.append(f"CPU per round grows as tasks^{figures['cpu_exponent']}; {figures['at_target_tasks']} tasks: "
                 f"{figures['at_target_percent']}% of a core (target < {TARGET_PERCENT}%: "
                 f"{'met' if figures['within_target'] else 'NOT met'})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default="10,25,50", help="running tasks at each size, comma-separated (default 10,25,50)")
    p.add_argument("--rounds", type=int, default=6, help="measured rounds per size (default 6)")
    p.add_argument("--interval", type=int, default=10, help="the sampling interval the cost is spread over (s)")
    p.add_argument("--mongodb-uri", help="default: a private in-memory SecantusDB (its own process)")
    p.add_argument("--smoke", action="store_true", help="a small run: 2 and 4 tasks, one measured round each")
    args = p.parse_args(argv)
    if args.smoke:
        args.tasks, args.rounds = "2,4", 1
    figures = asyncio.run(bench(args))
    print(table(figures))
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
