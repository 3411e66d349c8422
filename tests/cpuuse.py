"""Where the suite's CPU goes, by test file: ``PAIQ_TEST_CPU_REPORT=FILE bash tests/run.sh`` (tests/conftest.py
then takes these hooks) writes, for each test file, the CPU seconds its pytest process spent on it and the CPU
of the processes it started and waited for (platforms, services, databases, benchmark runs), as JSON lines
in FILE.<worker>; ``python -m tests.cpuuse FILE`` adds them up, the costliest first.

What it cannot see: what the Docker engine, the containers and the run's RabbitMQ spend (none of them is a
child of pytest), and a process still running when the file ends (counted where it is waited for).
With ``--dist loadfile`` a file runs whole in one worker, so a file's figures are its own.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from collections.abc import Generator
from pathlib import Path

import pytest

_spent: dict[str, list[float]] = {}  # file -> [own CPU, children's CPU, wall seconds]


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    import time

    own0, children0 = _cpu()
    t0 = time.monotonic()
    yield
    own1, children1 = _cpu()
    spent = _spent.setdefault(item.location[0], [0.0, 0.0, 0.0])
    spent[0] += own1 - own0
    spent[1] += children1 - children0
    spent[2] += time.monotonic() - t0


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("PAIQ_TEST_CPU_REPORT")
    if not target or not _spent:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with Path(f"{target}.{worker}").open("a") as out:
        for file, (own, children, wall) in _spent.items():
            out.write(json.dumps({"file": file, "own": round(own, 2), "children": round(children, 2),
                                  "wall": round(wall, 2)}) + "\n")


def main(target: str) -> None:
    totals: dict[str, list[float]] = {}
    for path in Path(target).parent.glob(Path(target).name + ".*"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            t = totals.setdefault(row["file"], [0.0, 0.0, 0.0])
            t[0] += row["own"]
            t[1] += row["children"]
            t[2] += row["wall"]
    all_cpu = sum(own + children for own, children, _ in totals.values())
    print(f"{'file':70} {'pytest s':>9} {'children s':>10} {'CPU s':>8} {'share':>6} {'wall s':>8}")
    for file, (own, children, wall) in sorted(totals.items(), key=lambda kv: -(kv[1][0] + kv[1][1])):
        print(f"{file:70} {own:9.1f} {children:10.1f} {own + children:8.1f} "
              f"{100 * (own + children) / all_cpu:5.1f}% {wall:8.1f}")
    print(f"{'all':70} {sum(t[0] for t in totals.values()):9.1f} {sum(t[1] for t in totals.values()):10.1f} "
          f"{all_cpu:8.1f}")


if __name__ == "__main__":
    main(sys.argv[1])
