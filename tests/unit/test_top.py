"""``paiq top``'s screen (services.cli.top.render), from answers shaped as the API sends them."""

from __future__ import annotations

from typing import Any

import pytest

from services.cli.top import rate, render, size

pytestmark = pytest.mark.unit

GIB = 2**30


def point(**over: Any) -> dict[str, Any]:
    return {"time": 0, "spanMs": 10_000, "cpuCores": 0.98, "memoryBytes": 3 * GIB, "memoryPeakBytes": 3 * GIB,
            "networkReceiveBytesPerSecond": None, "networkTransmitBytesPerSecond": None,
            "diskReadBytesPerSecond": 0.0, "diskWriteBytesPerSecond": 12_288.0, "gpuUtilization": 87.0,
            "gpuMemoryBytes": 30 * GIB, **over}


def task(index: int, **over: Any) -> dict[str, Any]:
    return {"taskRoleName": "worker", "taskIndex": index, "nodeId": "node-1", "cpuNumber": 4, "gpus": [index],
            "memoryLimitBytes": 4 * GIB, "samples": 9, "firstTime": 0, "lastTime": 1, "cpuCoreSeconds": 9.0,
            "memoryPeakBytes": 3 * GIB, "gpuSecondsHeld": 90.0, "gpuSecondsUsed": 78.0, "gpuIdleSince": None,
            "gpuIdle": False, "last": point(), **over}


def answers(tasks: list[dict[str, Any]], warnings: tuple[str, ...] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    job = {"name": "train", "jobStatus": {"username": "alice", "state": "RUNNING"}}
    usage = {"tasksSampled": len(tasks), "cpuCoreHours": 0.005, "gpuHoursHeld": 2.0, "gpuHoursUsed": 0.52,
             "gpuUtilization": 26.0, "memoryPeakBytes": 3 * GIB, "memoryLimitBytes": 4 * GIB,
             "memoryPeakTask": "worker[0]" if tasks else None, "idleGpuTasks": [], "warnings": list(warnings)}
    return job, {"name": "train", "attempt": 2, "intervalSeconds": 10 if tasks else None, "usage": usage,
                 "tasks": tasks}


@pytest.mark.parametrize(("n", "text"), [(None, "-"), (0, "0 B"), (512, "512 B"), (3 * 1024 + 100, "3.1 KiB"),
                                         (200 * 2**20, "200 MiB"), (1.5 * GIB, "1.5 GiB")])
def test_sizes_are_binary_units(n: float | None, text: str) -> None:
    assert size(n) == text
    assert rate(n) == ("-" if n is None else f"{text}/s")


def test_the_screen_sums_the_job_and_shows_each_task() -> None:
    idle = task(1, gpuIdle=True, last=point(gpuUtilization=0.5, cpuCores=0.01))
    screen = render(*answers([task(0), idle], ("task worker[1] held 1 GPU used under 5% (at most 0.5%) for 42 min",)),
                    now_ms=0).splitlines()
    assert screen[0].startswith("job alice~train  RUNNING  attempt 2  sampled every 10 s  at ")
    assert screen[1] == ("GPU-hours used 0.52 of 2.00 held (26%); CPU core-hours 0.005; closest to its memory limit: "
                         "worker[0] peaked at 3.0 GiB of 4.0 GiB")
    assert screen[2] == "! task worker[1] held 1 GPU used under 5% (at most 0.5%) for 42 min"
    busy = next(line for line in screen if line.startswith("worker[0]")).split()
    assert busy[:3] == ["worker[0]", "node-1", "0.98"] and "87%" in busy and "-" in busy
    assert "12.0 KiB/s" in " ".join(busy)
    flagged = next(line for line in screen if line.startswith("worker[1]"))
    assert "0%!" in flagged, "an idle task's GPU figure is marked"


def test_before_any_sample_the_screen_says_so() -> None:
    screen = render(*answers([]), now_ms=0)
    assert "not sampled yet" in screen and "(no task sampled yet: tasks are sampled while they run)" in screen
    assert "GPU-hours" not in screen


def test_a_task_without_gpus_or_readings_shows_dashes_not_zeros() -> None:
    plain = task(0, gpus=[], last=point(gpuUtilization=None, gpuMemoryBytes=None, diskReadBytesPerSecond=None,
                                        diskWriteBytesPerSecond=None))
    row = next(line for line in render(*answers([plain]), now_ms=0).splitlines() if line.startswith("worker[0]"))
    assert row.split()[-2:] == ["-", "-"] and "0 B/s" not in row
