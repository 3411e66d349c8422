"""Every benchmark runs at its smoke size, so none can rot unseen.

Each ``tests/benchmarks/<name>.py`` with a ``__main__`` is run as ``python tests/benchmarks/<name>.py --smoke``
(against the test run's RabbitMQ, PAIQ_TEST_AMQP_URL, and the Docker engine; each starts its own SecantusDB and,
where it needs them, the services) and must exit 0 with a table and, as its last line, one JSON object.
What the smoke runs check is that the benchmarks run, not their figures. They run side by side, a few at a
time, started when the first of them is asked for (the longest first), so the whole takes about as long as
the slowest one and what queues behind it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
REPO = BENCHMARKS.parents[1]
# Each benchmark, with the seconds its smoke run may take (several run at once on a shared 2-core machine).
# Listed longest first: that is the order they are started in.
SMOKE: dict[str, float] = {
    "history": 300,
    "worst_job": 240,
    "submit_to_scheduled": 210,
    "burst": 180,
    "bigjob": 150,
    "nodes": 150,
    "launch": 120,
    "idle_running": 120,
    "profiling": 120,
    "store_inserts": 120,
    "preemption": 60,
    "notify": 60,
    "placement": 60,
}
HELPERS = {"figures", "platform_run"}  # modules the benchmarks import; not run on their own
AT_ONCE = 3


@dataclass(frozen=True)
class Run:
    name: str
    returncode: int | None  # None: killed at its limit
    seconds: float
    stdout: str
    stderr: str

    def failure(self) -> str:
        verdict = f"killed after {self.seconds:.0f}s" if self.returncode is None else f"exit {self.returncode}"
        return (f"{self.name}.py --smoke: {verdict}\n--- stdout (end) ---\n{self.stdout[-3000:]}\n"
                f"--- stderr (end) ---\n{self.stderr[-5000:]}")


class SmokeRuns:
    """The runs asked for, started together a few at a time; each one's process group killed if it overstays."""

    def __init__(self, names: list[str], env: dict[str, str]) -> None:
        self._env = env
        self._procs: set[subprocess.Popen[str]] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._pool = ThreadPoolExecutor(max_workers=AT_ONCE, thread_name_prefix="benchmark-smoke")
        self.runs: dict[str, Future[Run]] = {n: self._pool.submit(self._run, n) for n in names}

    def _run(self, name: str) -> Run:
        t0 = time.monotonic()
        with self._lock:
            if self._closed:
                return Run(name, None, 0.0, "", "the session ended before it started")
            proc = subprocess.Popen([sys.executable, str(BENCHMARKS / f"{name}.py"), "--smoke"], cwd=REPO,
                                    env=self._env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)  # its group: the services it starts go with it
            self._procs.add(proc)
        try:
            out, err = proc.communicate(timeout=SMOKE[name])
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            self._kill(proc)
            out, err = proc.communicate()
            code = None
        finally:
            with self._lock:
                self._procs.discard(proc)
        return Run(name, code, time.monotonic() - t0, out, err)

    @staticmethod
    def _kill(proc: subprocess.Popen[str]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for proc in self._procs:
                self._kill(proc)
        self._pool.shutdown(wait=True, cancel_futures=True)


def benchmark_files() -> dict[str, bool]:
    """Every module in tests/benchmarks/, and whether it runs on its own (has a ``__main__`` block)."""
    return {p.stem: 'if __name__ == "__main__":' in p.read_text() for p in sorted(BENCHMARKS.glob("*.py"))}


def test_every_benchmark_has_a_smoke_run() -> None:
    files = benchmark_files()
    runnable = {name for name, main in files.items() if main}
    assert runnable - SMOKE.keys() == set(), "benchmarks without a smoke run: add them to SMOKE"
    assert SMOKE.keys() - runnable == set(), "SMOKE names benchmarks that are gone or not runnable"
    assert set(files) - runnable == HELPERS, "a module of tests/benchmarks/ that is neither benchmark nor helper"


@pytest.fixture(scope="module")
def smoke_runs(request: pytest.FixtureRequest, amqp_url: str,
               docker_client: docker.DockerClient) -> Iterator[SmokeRuns]:
    """The smoke runs of the benchmarks this session selected, started at once, the longest first."""
    wanted = {item.callspec.params["name"] for item in request.session.items
              if isinstance(item, pytest.Function) and item.module is request.module
              and hasattr(item, "callspec") and "name" in item.callspec.params}
    runs = SmokeRuns([n for n in SMOKE if n in wanted], {**os.environ, "PAIQ_TEST_AMQP_URL": amqp_url})
    yield runs
    runs.close()


@pytest.mark.parametrize("name", sorted(SMOKE))
def test_benchmark_runs_at_its_smoke_size(name: str, smoke_runs: SmokeRuns) -> None:
    run = smoke_runs.runs[name].result()
    assert run.returncode == 0, run.failure()
    lines = run.stdout.strip().splitlines()
    assert len(lines) >= 2, f"no table before the figures\n{run.failure()}"
    try:
        figures = json.loads(lines[-1])
    except json.JSONDecodeError as e:
        raise AssertionError(f"the last line is not JSON ({e})\n{run.failure()}") from e
    assert isinstance(figures, dict) and figures, f"the last line is not a JSON object of figures\n{run.failure()}"
    print(f"{name}.py --smoke: {run.seconds:.1f} s")
