"""The harness as the platform's supervisor: it starts paiq's processes, kills them on schedule, starts
them again, and restarts (and records) any process that exits without having been killed.

Every start appends to the process's one log file after a banner line, so a log shows each life of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.backends import log_tail
from tests.infra import PYTHON, REPO

RESTART_DELAY_S = 1.0


@dataclass
class SelfExit:
    """A process that ended although the harness did not kill it: what an operator needs to see."""

    service: str
    returncode: int
    at_s: float  # seconds since the harness began
    log_tail: str

    def describe(self) -> str:
        return (f"{self.service} exited by itself with code {self.returncode} at t={self.at_s:.1f}s; "
                f"its log ends:\n{self.log_tail}")


@dataclass
class ServiceProcess:
    """One paiq service process (``python -m <module>``) with its own environment and log."""

    name: str
    module: str
    env: dict[str, str]
    log: Path
    health_url: str
    proc: subprocess.Popen[bytes] | None = None
    held_down: bool = False  # killed by the harness; not to be restarted by the watch
    starts: int = 0
    kills: int = 0

    def start(self) -> None:
        with self.log.open("ab") as out:
            out.write(f"\n=== chaos harness: start #{self.starts + 1} of {self.name} at {time.strftime('%X')} ===\n"
                      .encode())
            out.flush()
            self.proc = subprocess.Popen([PYTHON, "-m", self.module], env=self.env, cwd=REPO, stdout=out,
                                         stderr=out)
        self.starts += 1
        self.held_down = False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """``kill -9`` and keep it down until :meth:`start`."""
        assert self.proc is not None
        self.held_down = True
        self.kills += 1
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is None:
            return
        self.held_down = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait()


@dataclass
class Supervisor:
    """Watches every process twice a second; one that ended unasked is recorded and started again."""

    began: float
    services: dict[str, ServiceProcess] = field(default_factory=dict)
    self_exits: list[SelfExit] = field(default_factory=list)
    _watch: asyncio.Task[None] | None = None

    def add(self, service: ServiceProcess) -> ServiceProcess:
        self.services[service.name] = service
        return service

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def start_watching(self) -> None:
        self._watch = asyncio.create_task(self._loop(), name="chaos-supervisor")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            for s in self.services.values():
                if s.held_down or s.proc is None or s.proc.poll() is None:
                    continue
                self.self_exits.append(SelfExit(s.name, s.proc.returncode, self.elapsed(), log_tail(s.log, 40)))
                await asyncio.sleep(RESTART_DELAY_S)
                s.start()

    async def stop_all(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        await asyncio.gather(*(asyncio.to_thread(s.stop) for s in self.services.values()))
