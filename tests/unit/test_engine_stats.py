"""The engine's stats answers read as counters (services.launcher.engine.enginestats), the sampler's step from one
reading to the next (services.launcher.profiling.samplestep), and the memory curve an OOM kill's diagnostics start
with (services.launcher.exits.memory_before_oom).

The cgroup v1 answers below were RECORDED from Docker 20.10 (cgroup v1, cgroupfs driver) with
``docker.from_env().api.stats(NAME, stream=False, one_shot=True)`` for busybox containers, trimmed to the
fields read (and the name). On that machine the engine reported no block I/O for any container
(``io_service_bytes_recursive: []``, even after ``dd oflag=direct``), so the block I/O entries are written
from Docker's documented shapes, as is the whole cgroup v2 answer: those are not recordings.
"""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import InsertOne, UpdateOne

from services.launcher.engine.enginestats import Counters, GpuReading, counters, engine_time_ns, usage_between
from services.launcher.engine.tasklabels import TaskLabels
from services.launcher.exits import memory_before_oom
from services.launcher.profiling.samplestep import MIB, Step, advance, new_profile
from shared.db.profiles import TaskProfile
from shared.profiling.idle import GpuIdleFinding, GpuIdlePolicy, IdleState
from shared.profiling.usage import Usage

pytestmark = pytest.mark.unit

# --- recorded answers (Docker 20.10, cgroup v1) ---------------------------------------------------

# `docker run -d --rm local/busybox:latest sh -c 'dd if=/dev/zero of=/tmp/f bs=1M count=20; sleep 60'`
# on the default bridge: 20 MB written to /tmp is mostly inactive file cache
V1_BRIDGE: dict[str, Any] = {
    "read": "2026-11-23T21:25:23.407399096Z",
    "cpu_stats": {"cpu_usage": {"total_usage": 28507001}, "online_cpus": 2},
    "memory_stats": {"usage": 24084480, "stats": {"inactive_file": 21942272, "total_inactive_file": 21942272},
                     "limit": 25276510208},
    "blkio_stats": {"io_service_bytes_recursive": []},
    "networks": {"eth0": {"rx_bytes": 736, "tx_bytes": 0}},
    "name": "/pq_stats_bridge"}

# `docker run -d --rm --network none local/busybox:latest sleep 60`: no "networks" key at all
# (the time has 8 fractional digits: the engine drops trailing zeros)
V1_NO_NETWORK: dict[str, Any] = {
    "read": "2026-11-23T21:25:24.41104339Z",
    "cpu_stats": {"cpu_usage": {"total_usage": 19844420}, "online_cpus": 2},
    "memory_stats": {"usage": 421888, "stats": {"inactive_file": 0, "total_inactive_file": 0}, "limit": 25276510208},
    "blkio_stats": {"io_service_bytes_recursive": []},
    "name": "/pq_stats_none"}

# `docker run -d --rm local/busybox:latest sh -c 'while :; do :; done & ...; sleep 60'`, read twice ~1 s apart:
# one core busy
V1_BUSY_1: dict[str, Any] = {
    "read": "2026-11-23T21:25:42.986939832Z",
    "cpu_stats": {"cpu_usage": {"total_usage": 2201669070}, "online_cpus": 2},
    "memory_stats": {"usage": 745472, "stats": {"inactive_file": 0, "total_inactive_file": 0}, "limit": 25276510208},
    "blkio_stats": {"io_service_bytes_recursive": []},
    "networks": {"eth0": {"rx_bytes": 426, "tx_bytes": 0}},
    "name": "/pq_stats_busy"}
V1_BUSY_2: dict[str, Any] = {
    "read": "2026-11-23T21:25:44.15346969Z",
    "cpu_stats": {"cpu_usage": {"total_usage": 3363921157}, "online_cpus": 2},
    "memory_stats": {"usage": 745472, "stats": {"inactive_file": 0, "total_inactive_file": 0}, "limit": 25276510208},
    "blkio_stats": {"io_service_bytes_recursive": []},
    "networks": {"eth0": {"rx_bytes": 516, "tx_bytes": 0}},
    "name": "/pq_stats_busy"}

# `docker create local/busybox:latest true`, never started: the engine's answer for a container not running
NOT_RUNNING: dict[str, Any] = {
    "read": "0001-01-01T00:00:00Z",
    "cpu_stats": {"cpu_usage": {"total_usage": 0}},
    "memory_stats": {},
    "blkio_stats": {"io_service_bytes_recursive": None},
    "name": "/pq_stats_created"}

# --- written from Docker's documented formats (not recordings) ------------------------------------

# cgroup v1 block I/O: one entry per device and op, ops capitalised (Read, Write, Sync, Async, Discard, Total)
V1_BLKIO = [{"major": 8, "minor": 0, "op": op, "value": v} for op, v in
            (("Read", 4096), ("Write", 1_048_576), ("Sync", 1_052_672), ("Async", 0), ("Discard", 0),
             ("Total", 1_052_672))] + [
           {"major": 8, "minor": 16, "op": op, "value": v} for op, v in
            (("Read", 8192), ("Write", 0), ("Sync", 8192), ("Async", 0), ("Total", 8192))]

# cgroup v2 (Docker's v2 format: memory_stats.stats without total_*, the cache is "inactive_file"; block
# I/O ops lowercase; no percpu_usage). Follows the documented field names; not a recording.
V2: dict[str, Any] = {
    "read": "2026-01-02T03:04:05.123456789Z",
    "cpu_stats": {"cpu_usage": {"total_usage": 5_000_000_000, "usage_in_kernelmode": 1_000_000_000,
                                "usage_in_usermode": 4_000_000_000}, "online_cpus": 4},
    "memory_stats": {"usage": 300_000_000, "stats": {"anon": 200_000_000, "file": 100_000_000,
                                                     "active_file": 40_000_000, "inactive_file": 60_000_000},
                     "limit": 1_073_741_824},
    "blkio_stats": {"io_service_bytes_recursive": [{"major": 259, "minor": 0, "op": "read", "value": 1000},
                                                   {"major": 259, "minor": 0, "op": "write", "value": 2000}]},
    "networks": {"eth0": {"rx_bytes": 10, "tx_bytes": 20}, "eth1": {"rx_bytes": 100, "tx_bytes": 200}}}


def answer(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A copy of ``base`` with top-level keys replaced (None: removed)."""
    out = {**base, **changes}
    return {k: v for k, v in out.items() if v is not None}


def memory(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base["memory_stats"], **changes}


# --- engine times ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "ns"), [
    ("1970-01-01T00:00:00Z", 0),
    ("1970-01-01T00:00:01.000000001Z", 1_000_000_001),
    ("2026-01-01T00:00:00Z", 1_767_225_600 * 10**9),
    ("2026-01-01T00:00:00.5Z", 1_767_225_600 * 10**9 + 500_000_000),
    ("2026-11-23T21:25:23.407399096Z", 1_795_469_123_407_399_096),
    ("2026-11-23T21:25:24.41104339Z", 1_795_469_124_411_043_390),  # 8 digits, right-padded
])
def test_engine_time(text: str, ns: int) -> None:
    assert engine_time_ns(text) == ns


# --- counters ----------------------------------------------------------------------------------------

NS_23 = 1_795_469_123_407_399_096
LIMIT = 25276510208


@pytest.mark.parametrize(("stats", "expected"), [
    # memory: usage less the inactive file cache (20 MB written to /tmp), as `docker stats` shows it
    (V1_BRIDGE, Counters(t_ns=NS_23, cpu_ns=28507001, mem=24084480 - 21942272, mem_limit=LIMIT,
                         net_rx=736, net_tx=0)),
    # no network of its own: not measured, not zero
    (V1_NO_NETWORK, Counters(t_ns=1_795_469_124_411_043_390, cpu_ns=19844420, mem=421888, mem_limit=LIMIT)),
    # networks summed over interfaces; v2 memory less "inactive_file"; v2 block I/O ops lowercase
    (V2, Counters(t_ns=1_767_323_045_123_456_789, cpu_ns=5_000_000_000, mem=240_000_000, mem_limit=1_073_741_824,
                  net_rx=110, net_tx=220, blk_read=1000, blk_write=2000)),
    # v1 block I/O: "Read" and "Write" summed over devices; Sync, Async, Discard and Total ignored
    (answer(V1_BRIDGE, blkio_stats={"io_service_bytes_recursive": V1_BLKIO}),
     Counters(t_ns=NS_23, cpu_ns=28507001, mem=2142208, mem_limit=LIMIT, net_rx=736, net_tx=0,
              blk_read=12288, blk_write=1_048_576)),
    # v1 says "total_inactive_file" (the hierarchy's) beside "inactive_file" (the cgroup's own): the total wins
    (answer(V1_BRIDGE, memory_stats=memory(V1_BRIDGE, stats={"inactive_file": 1, "total_inactive_file": 84480})),
     Counters(t_ns=NS_23, cpu_ns=28507001, mem=24_000_000, mem_limit=LIMIT, net_rx=736, net_tx=0)),
    # a cache figure not below the usage is ignored (the engine's own rule)
    (answer(V1_BRIDGE, memory_stats=memory(V1_BRIDGE, stats={"total_inactive_file": 24084480})),
     Counters(t_ns=NS_23, cpu_ns=28507001, mem=24084480, mem_limit=LIMIT, net_rx=736, net_tx=0)),
    (answer(V1_BRIDGE, memory_stats={"usage": 5}),  # no detail, no limit
     Counters(t_ns=NS_23, cpu_ns=28507001, mem=5, mem_limit=0, net_rx=736, net_tx=0)),
    (answer(V1_BRIDGE, blkio_stats={"io_service_bytes_recursive": None}, networks={}),
     Counters(t_ns=NS_23, cpu_ns=28507001, mem=2142208, mem_limit=LIMIT)),
    (answer(V1_BRIDGE, blkio_stats=None),
     Counters(t_ns=NS_23, cpu_ns=28507001, mem=2142208, mem_limit=LIMIT, net_rx=736, net_tx=0)),
])
def test_counters(stats: dict[str, Any], expected: Counters) -> None:
    assert counters(stats) == expected


@pytest.mark.parametrize("stats", [
    NOT_RUNNING,  # recorded: "read" of the zero time, no memory stats
    answer(V1_BRIDGE, read="0001-01-01T00:00:00Z"),
    answer(V1_BRIDGE, read=None),
    answer(V1_BRIDGE, read=""),
    answer(V1_BRIDGE, memory_stats={}),
    answer(V1_BRIDGE, memory_stats=None),
    answer(V1_BRIDGE, cpu_stats={}),
    answer(V1_BRIDGE, cpu_stats={"cpu_usage": {}}),
    {},
])
def test_no_reading(stats: dict[str, Any]) -> None:
    assert counters(stats) is None


# --- usage between two readings ----------------------------------------------------------------------

SEC = 1_000_000_000
T0_NS = 1_767_225_600 * SEC


def reading(t_s: float, cpu_s: float = 0.0, mem: int = 100, net: int | None = 0, blk: int = 0,
            limit: int = 0) -> Counters:
    """Counters ``t_s`` seconds after T0 with ``cpu_s`` seconds of CPU, ``net`` bytes each way, ``blk`` each way."""
    return Counters(t_ns=T0_NS + round(t_s * SEC), cpu_ns=round(cpu_s * SEC), mem=mem, mem_limit=limit,
                    net_rx=net, net_tx=None if net is None else 2 * net, blk_read=blk, blk_write=3 * blk)


def gpu(index: int, util: float, mem: int = 1000) -> GpuReading:
    return GpuReading(index=index, utilization_percent=util, memory_used_bytes=mem)


T0_MS = 1_767_225_600_000


def usage(t_s: int, span_s: int, cpu: float, mem: int = 100, mem_peak: int = 100, **fields: Any) -> Usage:
    return Usage(t_ms=T0_MS + t_s * 1000, span_ms=span_s * 1000, cpu=cpu, mem=mem, mem_peak=mem_peak, **fields)


@pytest.mark.parametrize(("prev", "cur", "gpus", "expected"), [
    (reading(0), reading(10), (), usage(10, 10, 0.0, net_rx=0.0, net_tx=0.0, blk_read=0.0, blk_write=0.0)),
    # 20 CPU-seconds in 10 s: two cores; rates per second; the peak is the higher of the two readings
    (reading(0, cpu_s=5, mem=300, net=1000, blk=0), reading(10, cpu_s=25, mem=200, net=6000, blk=4096), (),
     usage(10, 10, 2.0, mem=200, mem_peak=300, net_rx=500.0, net_tx=1000.0, blk_read=409.6, blk_write=1228.8)),
    # no network of its own: the rates are not measured
    (reading(0, net=None), reading(10, net=None), (), usage(10, 10, 0.0, blk_read=0.0, blk_write=0.0)),
    (reading(0, net=None), reading(10, net=50), (), usage(10, 10, 0.0, blk_read=0.0, blk_write=0.0)),
    # a byte counter that went back (the interface was replaced): that rate is unknown, the rest stands
    (reading(0, net=500, blk=10), reading(10, net=100, blk=20), (),
     usage(10, 10, 0.0, blk_read=1.0, blk_write=3.0)),
    # GPUs: the mean utilisation, the memory summed
    (reading(0), reading(10), (gpu(0, 30.0, 1000), gpu(1, 50.0, 3000)),
     usage(10, 10, 0.0, net_rx=0.0, net_tx=0.0, blk_read=0.0, blk_write=0.0, gpu_util=40.0, gpu_mem=4000)),
])
def test_usage_between(prev: Counters, cur: Counters, gpus: tuple[GpuReading, ...], expected: Usage) -> None:
    assert usage_between(prev, cur, gpus) == expected


@pytest.mark.parametrize(("prev", "cur"), [
    (reading(10), reading(10)),  # no span
    (reading(10), reading(5)),  # out of order
    (reading(0, cpu_s=100), reading(10, cpu_s=1)),  # CPU time went back: a new container
])
def test_no_usage_between(prev: Counters, cur: Counters) -> None:
    assert usage_between(prev, cur) is None


def test_usage_between_recorded_readings() -> None:
    """A busy loop read twice by the real engine: one core, about 77 bytes/s received."""
    prev, cur = counters(V1_BUSY_1), counters(V1_BUSY_2)
    assert prev is not None and cur is not None
    point = usage_between(prev, cur)
    assert point is not None
    assert (point.t_ms, point.span_ms) == (1_795_469_144_153, 1167)  # whole ms: 144,153 less 142,986
    assert point.cpu == pytest.approx(0.9963, abs=1e-4)
    assert (point.mem, point.mem_peak) == (745472, 745472)
    assert point.net_rx == pytest.approx(90 / 1.166529858)
    assert (point.net_tx, point.blk_read, point.blk_write, point.gpu_util, point.gpu_mem) == (0.0, 0.0, 0.0, None, None)


def test_consecutive_readings_make_contiguous_points() -> None:
    """Three readings (the recorded engine times): each point should start where the previous one ended."""
    readings = [counters(V1_NO_NETWORK), counters(V1_BUSY_1), counters(V1_BUSY_2)]
    assert all(r is not None for r in readings)
    a, b, c = (r.model_copy(update={"net_rx": None, "net_tx": None}) for r in readings if r is not None)
    first, second = usage_between(a, b), usage_between(b, c)
    assert first is not None and second is not None
    assert second.start_ms == first.t_ms  # the recorded times are not whole ms: each span ends on the next


# --- the sampler's step --------------------------------------------------------------------------------

IDLE_FAST = GpuIdlePolicy(below_percent=5.0, after_ms=20_000)


def labels(gpus: tuple[int, ...] = (), memory_mb: int = 512) -> TaskLabels:
    return TaskLabels(job="alice~train", attempt=1, role="worker", index=2, user="alice", vc="default", node="n1",
                      memory_mb=memory_mb, cpus=2, gpus=gpus)


def profile(gpus: tuple[int, ...] = (), memory_mb: int = 512) -> TaskProfile:
    return new_profile(labels(gpus, memory_mb), "n1", 10_000, reading(0, limit=4 * 1024 * MIB))


def test_new_profile() -> None:
    p = profile(gpus=(1, 3))
    assert p.id == "alice~train/1/worker/2"
    assert p.model_dump(exclude={"series", "totals", "idle", "last"}) == {
        "job_id": "alice~train", "attempt": 1, "role": "worker", "index": 2, "task_attempt": 0,
        "node_id": "n1", "vc": "default", "cpus": 2, "gpus": (1, 3), "mem_limit": 512 * MIB, "interval_ms": 10_000}
    assert (p.series.size, p.last, p.totals.samples, p.idle) == (0, None, 0, IdleState())


def test_new_profile_without_a_memory_label_takes_the_engines_limit() -> None:
    assert profile(memory_mb=0).mem_limit == 4 * 1024 * MIB


def steps(p: TaskProfile, readings: list[Counters], gpus: list[dict[int, GpuReading]] | None = None,
          stored: bool = False) -> list[Step]:
    """Advance through ``readings`` as the sampler does: prev is the last reading, stored once written."""
    out, prev = [], None
    for i, cur in enumerate(readings):
        step = advance(p, stored, prev, cur, gpus[i] if gpus else {}, IDLE_FAST)
        out.append(step)
        p, prev, stored = step.profile, cur, stored or step.write is not None
    return out


def test_the_first_reading_only_primes() -> None:
    p = profile()
    assert advance(p, False, None, reading(0), {}, IDLE_FAST) == Step(profile=p)
    assert advance(p, True, None, reading(0), {}, IDLE_FAST) == Step(profile=p)  # after a launcher restart


def test_each_later_reading_adds_a_point() -> None:
    run = steps(profile(), [reading(0, mem=40), reading(10, cpu_s=10, mem=50), reading(20, cpu_s=30, mem=70)])
    assert [s.write is not None for s in run] == [False, True, True]
    last = run[-1].profile
    assert [p.cpu for p in last.series.points()] == [1.0, 2.0]
    assert last.last == last.series.points()[-1]
    assert (last.totals.samples, last.totals.cpu_seconds, last.totals.mem_peak) == (2, 30.0, 70)
    assert (last.totals.first_ms, last.totals.last_ms) == (T0_MS, T0_MS + 20_000)


def test_the_write_inserts_a_new_profile_then_updates_it() -> None:
    run = steps(profile(), [reading(0), reading(10), reading(20)])
    first, second = run[1].write, run[2].write
    assert first is not None and second is not None
    assert (first.new, second.new) == (True, False)
    assert isinstance(first.operation(), InsertOne)
    assert isinstance(second.operation(), UpdateOne)
    assert second.profile == run[2].profile


def test_a_stored_profile_is_updated_from_its_first_point() -> None:
    run = steps(profile(), [reading(0), reading(10)], stored=True)
    write = run[1].write
    assert write is not None and not write.new
    assert isinstance(write.operation(), UpdateOne)


@pytest.mark.parametrize(("prev", "cur"), [
    (reading(10), reading(10)),
    (reading(0, cpu_s=50), reading(10, cpu_s=1)),  # the container was replaced
])
def test_no_point_no_write(prev: Counters, cur: Counters) -> None:
    p = profile()
    assert advance(p, True, prev, cur, {}, IDLE_FAST) == Step(profile=p)


@pytest.mark.parametrize(("task_gpus", "read", "util", "gpu_mem"), [
    ((0, 1), {0: gpu(0, 10.0, 100), 1: gpu(1, 30.0, 300)}, 20.0, 400),
    ((1,), {0: gpu(0, 90.0), 1: gpu(1, 30.0, 300)}, 30.0, 300),  # only the task's own GPUs count
    ((0, 1), {0: gpu(0, 10.0)}, None, None),  # not all of its GPUs read: not measured (never a partial mean)
    ((0, 1), {}, None, None),  # no NVML
    ((), {0: gpu(0, 90.0)}, None, None),  # a task without GPUs
])
def test_gpu_readings(task_gpus: tuple[int, ...], read: dict[int, GpuReading], util: float | None,
                      gpu_mem: int | None) -> None:
    run = steps(profile(gpus=task_gpus), [reading(0), reading(10)], [read, read])
    point = run[1].profile.last
    assert point is not None
    assert (point.gpu_util, point.gpu_mem) == (util, gpu_mem)


def test_idle_gpus_are_found_once() -> None:
    idle = {0: gpu(0, 1.0)}
    run = steps(profile(gpus=(0,)), [reading(10 * i) for i in range(5)], [idle] * 5)
    assert [s.finding for s in run] == [None, None,
                                       GpuIdleFinding(since_ms=T0_MS, idle_ms=20_000, peak_percent=1.0,
                                                      below_percent=5.0), None, None]
    last = run[-1].profile
    assert last.idle.flagged
    assert (last.totals.gpu_held_seconds, last.totals.gpu_used_seconds) == (40.0, 0.4)


# --- the memory curve before an OOM kill ------------------------------------------------------------------


def peak(mib: float, span_s: float = 10) -> Usage:
    return Usage(t_ms=T0_MS, span_ms=round(span_s * 1000), cpu=0.0, mem=0, mem_peak=round(mib * MIB))


@pytest.mark.parametrize(("points", "limit", "text"), [
    ([], 256, ""),
    ([peak(100), peak(200), peak(255)], 256,
     "memory before the OOM kill (MB, a sample every 10 s, oldest first): 100, 200, 255; limit 256 MB"),
    ([peak(0.4, 9.6), peak(1.6, 10.4)], 2,
     "memory before the OOM kill (MB, a sample every 10 s, oldest first): 0, 2; limit 2 MB"),
    ([peak(1024, 5)], 1024, "memory before the OOM kill (MB, a sample every 5 s, oldest first): 1024; limit 1024 MB"),
])
def test_memory_before_oom(points: list[Usage], limit: int, text: str) -> None:
    assert memory_before_oom(points, limit) == text
