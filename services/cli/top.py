"""``paiq top JOB``: what each task of a job uses now, refreshed as the launchers sample it.

:func:`render` is pure (a job's profile answer -> the screen); :func:`follow` asks the API again every
sampling interval until the job is over (or once, with ``--once``).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any

from services.cli.client import PaiqClient

FINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
CLEAR = "\x1b[H\x1b[2J"


def size(n: float | None) -> str:
    """Bytes in binary units: ``512 B``, ``3.1 KiB``, ``200 MiB``, ``1.5 GiB``."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" or abs(n) >= 100 else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def rate(n: float | None) -> str:
    return "-" if n is None else f"{size(n)}/s"


def _pair(a: float | None, b: float | None) -> str:
    return "-" if a is None and b is None else f"{rate(a)} / {rate(b)}"


def render(job: dict[str, Any], profile: dict[str, Any], now_ms: int) -> str:
    """The screen for a job (its detail answer) and its profile answer."""
    status = job["jobStatus"]
    every = profile.get("intervalSeconds")
    sampled = f"sampled every {every:g} s" if every else "not sampled yet"
    at = time.strftime("%H:%M:%S", time.localtime(now_ms / 1000))
    ref = f"{status['username']}~{job['name']}"
    head = f"job {ref}  {status['state']}  attempt {profile['attempt']}  {sampled}  at {at}"
    u = profile["usage"]
    lines = [head]
    if u["tasksSampled"]:
        gpu = ""
        if u["gpuHoursHeld"]:
            used = "not measured" if u["gpuHoursUsed"] is None else f"{u['gpuHoursUsed']:.2f}"
            share = "" if u["gpuUtilization"] is None else f" ({u['gpuUtilization']:.0f}%)"
            gpu = f"GPU-hours used {used} of {u['gpuHoursHeld']:.2f} held{share}; "
        memory = ""
        if u["memoryPeakTask"]:
            limit = f" of {size(u['memoryLimitBytes'])}" if u["memoryLimitBytes"] else ""
            peak = size(u["memoryPeakBytes"])
            memory = f"; closest to its memory limit: {u['memoryPeakTask']} peaked at {peak}{limit}"
        lines.append(f"{gpu}CPU core-hours {u['cpuCoreHours']:.3f}{memory}")
    lines += [f"! {w}" for w in u["warnings"]]
    lines.append("")
    lines.append(f"{'TASK':20} {'NODE':16} {'CPU':>6} {'MEMORY / LIMIT':>21} {'NET RX / TX':>23} "
                 f"{'DISK READ / WRITE':>23} {'GPU':>5} {'GPU MEM':>9}")
    for t in profile["tasks"]:
        p = t.get("last") or {}
        name = f"{t['taskRoleName']}[{t['taskIndex']}]"
        cpu = f"{p['cpuCores']:.2f}" if p else "-"
        mem = f"{size(p.get('memoryBytes'))} / {size(t['memoryLimitBytes'] or None)}" if p else "-"
        gpu = "-" if not t["gpus"] or p.get("gpuUtilization") is None else f"{p['gpuUtilization']:.0f}%"
        gpu += "!" if t["gpuIdle"] else ""
        lines.append(f"{name:20} {t['nodeId']:16} {cpu:>6} {mem:>21} "
                     f"{_pair(p.get('networkReceiveBytesPerSecond'), p.get('networkTransmitBytesPerSecond')):>23} "
                     f"{_pair(p.get('diskReadBytesPerSecond'), p.get('diskWriteBytesPerSecond')):>23} {gpu:>5} "
                     f"{size(p.get('gpuMemoryBytes')) if t['gpus'] else '-':>9}")
    if not profile["tasks"]:
        lines.append("(no task sampled yet: tasks are sampled while they run)")
    return "\n".join(lines) + "\n"


async def follow(client: PaiqClient, user: str, name: str, *, once: bool,
                 write: Callable[[str], object] = sys.stdout.write) -> int:
    """Show the job's usage; again every sampling interval (at least 1 s) until it is over."""
    clear = sys.stdout.isatty() and not once
    while True:
        job = await client.job(user, name)
        profile = await client.profile(user, name)
        write((CLEAR if clear else "") + render(job, profile, int(time.time() * 1000)))
        if once or job["jobStatus"]["state"] in FINAL:
            return 0
        await asyncio.sleep(max(1.0, float(profile.get("intervalSeconds") or 2)))
