"""One container's bad, empty or refused stats cost that sample only, never the sampling round.

The answers below were RECORDED from Docker 20.10 (cgroup v2) while a busybox container was sampled:
``EXITED`` is what ``api.stats(ID, stream=False, one_shot=True)`` answers for a container that has
exited (the request waited while it stopped); ``EMPTY`` is the body of the 200 answer to a stats request
in flight while the container is force-removed (``docker rm -f``, as the launcher removes a task's
container once its exit is reported), on which the SDK's JSON decoding raises ``JSONDecodeError:
Expecting value``; ``GONE`` the 404 after it. The malformed dicts are not recordings: they stand for an
engine (or a proxy in front of one) answering something else than its documented shape.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import docker.errors
import pytest
import requests
from prometheus_client import REGISTRY

from services.launcher.deps import LauncherDeps
from services.launcher.engine.enginestats import Counters, counters
from services.launcher.engine.tasklabels import TaskLabels
from services.launcher.profiling.sampling import Sampler
from shared.bus.memory import MemoryBus
from shared.db.logs import LogStore
from shared.db.profiles import ProfileStore, ProfileWrite, TaskProfile
from shared.db.store import Store
from shared.settings.model import Settings
from shared.taskref import TaskRef
from tests.unit.test_engine_stats import V1_BUSY_1, V1_BUSY_2

pytestmark = pytest.mark.unit

EXITED: dict[str, Any] = {
    "read": "0001-01-01T00:00:00Z", "preread": "0001-01-01T00:00:00Z", "pids_stats": {},
    "blkio_stats": {"io_service_bytes_recursive": None, "io_serviced_recursive": None},
    "num_procs": 0, "storage_stats": {},
    "cpu_stats": {"cpu_usage": {"total_usage": 0, "usage_in_kernelmode": 0, "usage_in_usermode": 0},
                  "throttling_data": {"periods": 0, "throttled_periods": 0, "throttled_time": 0}},
    "memory_stats": {}, "name": "/vigorous_yonath",
    "id": "c71fd5d58ac1364951b58cbabfe052d6cc746a6f592060f112de97f561e4fb27"}
EMPTY = b""
GONE = b'{"message":"No such container: be7434977fb1f9eeef2ea112c21c16ee51d269bc4accf3aa51b511ca7a8bd3bc"}\n'


def answer(**changes: Any) -> dict[str, Any]:
    out = dict(V1_BUSY_1)
    out.update(changes)
    return out


@pytest.mark.parametrize("stats", [
    EXITED,
    None, "", [], 42, {},
    answer(read=5),
    answer(read="yesterday"),
    answer(read="2026-11-23T21:25:42.9869Zjunk"),
    answer(cpu_stats={"cpu_usage": {"total_usage": "n/a"}}),
    answer(cpu_stats={"cpu_usage": {"total_usage": None}}),
    answer(cpu_stats=[]),
    answer(memory_stats={"usage": "lots"}),
    answer(memory_stats={"usage": 1, "stats": {"inactive_file": "x"}}),
    answer(memory_stats={"usage": 1, "stats": ["inactive_file"]}),
    answer(networks={"eth0": "not a dict"}),
    answer(networks=["eth0"]),
    answer(networks={"eth0": {"rx_bytes": "many"}}),
    answer(blkio_stats={"io_service_bytes_recursive": [{"op": "Read", "value": "abc"}]}),
    answer(blkio_stats={"io_service_bytes_recursive": ["Read"]}),
    answer(blkio_stats={"io_service_bytes_recursive": 7}),
], ids=lambda s: json.dumps(s)[:60] if not isinstance(s, dict) or len(s) < 3 else None)
def test_an_answer_without_a_reading_is_none_never_an_error(stats: Any) -> None:
    assert counters(stats) is None


def test_the_empty_answer_is_what_the_sdk_fails_to_decode() -> None:
    """The recorded empty body, decoded as the SDK decodes a stats answer (``response.json()``): the error
    that failed whole rounds before. The driver takes it, as any failure of one container's stats, as no
    sample."""
    response = requests.Response()
    response.status_code, response._content = 200, EMPTY
    with pytest.raises(requests.exceptions.JSONDecodeError, match="Expecting value"):
        response.json()
    assert json.loads(GONE)["message"].startswith("No such container")


# --- the sampler: a round over several containers, each failing its own way ------------------------------

class _Response:
    status_code = 500
    reason = "Internal Server Error"
    url = "http+docker://localhost/v1.41/containers/x/stats"

    def __init__(self, status: int) -> None:
        self.status_code = status


def _json_error() -> Exception:
    response = requests.Response()
    response.status_code, response._content = 200, EMPTY
    try:
        response.json()
    except requests.exceptions.JSONDecodeError as e:
        return e
    raise AssertionError("the empty body decoded")


FAILURES: dict[str, Exception | None] = {
    "empty": _json_error(),
    "gone": docker.errors.NotFound("No such container", response=cast(Any, _Response(404))),
    "refused": docker.errors.APIError("stats failed", response=cast(Any, _Response(500)),
                                      explanation="container is being removed"),
    "timeout": requests.exceptions.ReadTimeout("read timed out"),
    "buggy": KeyError("cpu_stats"),
    "exited": None,  # the driver's own answer for EXITED
}


class FlakyDriver:
    """Every container answers its two recorded readings in turn, except those named in FAILURES, which
    fail (or answer nothing) every round."""

    def __init__(self, node: str, names: list[str]) -> None:
        self.node, self.names, self.calls = node, names, 0
        self.readings = [counters(V1_BUSY_1), counters(V1_BUSY_2)]

    async def list_running(self, node_id: str) -> list[Any]:
        from services.launcher.engine.driver import ContainerInfo
        return [ContainerInfo(id=name, name=name, running=True, labels=TaskLabels(
            job="alice~flaky~0a1b2c3d", attempt=0, role=name, index=0, node=self.node, user="alice",
            vc="default", memory_mb=128, cpus=1).to_labels()) for name in self.names]

    async def counters(self, container_id: str) -> Counters | None:
        self.calls += 1
        if container_id in FAILURES:
            failure = FAILURES[container_id]
            if failure is not None:
                raise failure
            return counters(EXITED)
        return self.readings[min(self.calls // len(self.names), 1)]


class MemoryProfiles:
    def __init__(self) -> None:
        self.saved: dict[str, TaskProfile] = {}

    async def get(self, key: TaskRef) -> TaskProfile | None:
        return self.saved.get(key.id)

    async def save(self, writes: list[ProfileWrite]) -> int:
        for w in writes:
            self.saved[w.profile.id] = w.profile
        return 0


def skipped(node: str) -> float:
    return REGISTRY.get_sample_value("paiq_launcher_samples_skipped_total", {"node": node}) or 0.0


async def test_a_round_samples_every_good_container_whatever_the_others_answer(tmp_path: Path) -> None:
    node = "sampling-unit"
    settings = Settings.from_env({"PAIQ_NODE_ID": node, "PAIQ_DATA_DIR": str(tmp_path)})
    driver = FlakyDriver(node, ["good", *FAILURES])
    deps = LauncherDeps(settings=settings, store=cast(Store, None), bus=MemoryBus(), driver=cast(Any, driver),
                        logs=cast(LogStore, None))
    profiles = MemoryProfiles()
    sampler = Sampler(deps, None, cast(ProfileStore, profiles))
    before = skipped(node)
    for _ in range(3):
        await sampler.round()  # never raises
    assert sampler.tracked == 1 + len(FAILURES)
    assert list(profiles.saved) == ["alice~flaky~0a1b2c3d/0/good/0"], "only the good container has samples"
    good = profiles.saved["alice~flaky~0a1b2c3d/0/good/0"]
    assert good.totals.samples == 1 and good.last is not None and 0.9 < good.last.cpu < 1.1
    assert skipped(node) - before == 3 * len(FAILURES), "every lost sample is counted"
