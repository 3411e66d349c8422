"""What container a task gets (services.launcher.container.spec): pull decisions, labels, debug wrapper,
bridge ports."""

from __future__ import annotations

from typing import Any

import pytest

from services.launcher.container.spec import (
    DEBUG_WRAPPER,
    container_spec,
    is_latest,
    parse_debug_marker,
    wants_pull,
)
from services.launcher.engine.docker_driver import (
    ICC_OPTION,
    create_args,
    network_gateway,
    start_failure,
)
from services.launcher.engine.enginestats import engine_time_ns
from shared.errors import DriverError
from shared.records import TaskSpec
from shared.settings.model import LauncherSettings

pytestmark = pytest.mark.unit


def make_spec(**overrides: Any) -> TaskSpec:
    values: dict[str, Any] = {
        "job_id": "alice~job1", "attempt": 2, "user": "alice", "virtual_cluster": "default", "role": "worker",
        "index": 1, "image": "registry.local:5000/team/train:v3", "command": "python train.py",
        "env": {"PAI_JOB_NAME": "job1"}, "cpus": 2, "memory_mb": 512, "shm_mb": 64,
        "ports": {"http": (20001, 20002), "ssh": (20003,)}}
    values.update(overrides)
    return TaskSpec.model_validate(values)


@pytest.mark.parametrize(("image", "latest"), [
    ("busybox", True), ("busybox:latest", True), ("local/busybox:latest", True),
    ("127.0.0.1:5000/busybox", True), ("127.0.0.1:5000/busybox:1", False), ("busybox:1.36", False),
    ("busybox@sha256:" + "a" * 64, False), ("127.0.0.1:5000/team/img:latest", True),
])
def test_latest_means_the_latest_tag_or_none(image: str, latest: bool) -> None:
    assert is_latest(image) is latest


@pytest.mark.parametrize(("image", "present", "pull_latest", "pull"), [
    ("img:1", False, True, True),
    ("img:1", True, True, False),
    ("img:latest", True, True, True),
    ("img:latest", True, False, False),
    ("img", False, False, True),
])
def test_pull_only_when_absent_or_latest(image: str, present: bool, pull_latest: bool, pull: bool) -> None:
    assert wants_pull(image, present=present, pull_latest=pull_latest) is pull


def test_labels_name_the_task() -> None:
    spec = container_spec(make_spec(), name="c1", node_id="n1", code_dir="", settings=LauncherSettings())
    assert spec.labels == {
        "paiq.job": "alice~job1", "paiq.user": "alice", "paiq.vc": "default", "paiq.role": "worker",
        "paiq.index": "1", "paiq.attempt": "2", "paiq.node": "n1", "paiq.debug": "0", "paiq.memory_mb": "512",
        "paiq.task_attempt": "0", "paiq.cpus": str(make_spec().cpus),
        "paiq.gpus": ",".join(str(g) for g in make_spec().gpus)}


def test_a_plain_task_runs_its_command_under_sh_on_the_task_network_with_its_limits() -> None:
    spec = container_spec(make_spec(), name="c1", node_id="n1", code_dir="/fs/code",
                          settings=LauncherSettings(), node_ip="172.18.0.1")
    args = create_args(spec)
    assert args["entrypoint"] == ["/bin/sh", "-c"] and args["command"] == ["python train.py"]
    assert args["network_mode"] == "paiq-tasks"
    assert args["privileged"] is False and args["init"] is True and args["cap_drop"] == ["NET_RAW"]
    assert args["pids_limit"] == 4096
    assert args["volumes"] == {"/fs/code": {"bind": "/pai/code", "mode": "ro"}}
    assert (args["mem_limit"], args["memswap_limit"], args["shm_size"]) == ("512m", "512m", "64m")
    assert args["log_config"]["Config"] == {"max-size": str(4 * 1024 * 1024), "max-file": "2"}


def test_bridge_networking_publishes_every_task_port_one_to_one_on_the_nodes_address() -> None:
    spec = container_spec(make_spec(), name="c1", node_id="n1", code_dir="", settings=LauncherSettings(),
                          node_ip="10.0.0.5")
    args = create_args(spec)
    assert args["network_mode"] == "paiq-tasks"
    assert args["ports"] == {f"{p}/{proto}": ("10.0.0.5", p) for p in (20001, 20002, 20003) for proto in ("tcp", "udp")}


def test_host_networking_is_the_operators_choice_and_publishes_nothing() -> None:
    settings = LauncherSettings.from_env({"PAIQ_NODE_NETWORK": "host", "PAIQ_TASK_NETWORK": "mine",
                                          "PAIQ_TASK_PIDS_LIMIT": "0"})
    args = create_args(container_spec(make_spec(), name="c1", node_id="n1", code_dir="", settings=settings,
                                      node_ip="127.0.0.1"))
    assert args["network_mode"] == "host" and "ports" not in args and "pids_limit" not in args


@pytest.mark.parametrize(("attrs", "gateway"), [
    ({"Driver": "bridge", "Options": {ICC_OPTION: "false"}, "IPAM": {"Config": [{"Gateway": "172.18.0.1"}]}},
     "172.18.0.1"),
    ({"Driver": "bridge", "Options": {ICC_OPTION: "false"},
      "IPAM": {"Config": [{"Gateway": "fd00::1"}, {"Gateway": "172.19.0.1"}]}}, "172.19.0.1"),
    ({"Driver": "bridge", "Options": {}, "IPAM": {"Config": [{"Gateway": "172.18.0.1"}]}},
     "reach one another's every port"),
    ({"Driver": "bridge", "Options": {ICC_OPTION: "true"}, "IPAM": {"Config": [{"Gateway": "172.18.0.1"}]}},
     "reach one another's every port"),
    ({"Driver": "macvlan", "Options": {ICC_OPTION: "false"}, "IPAM": {"Config": []}}, "not a bridge"),
    ({"Driver": "bridge", "Options": {ICC_OPTION: "false"}, "IPAM": {"Config": [{"Gateway": "fd00::1"}]}},
     "no IPv4 gateway"),
])
def test_a_task_network_is_taken_only_when_it_isolates_its_containers(attrs: dict[str, Any], gateway: str) -> None:
    if "." in gateway:
        assert network_gateway("paiq-tasks", attrs) == gateway
        return
    with pytest.raises(DriverError) as refused:
        network_gateway("paiq-tasks", attrs)
    assert gateway in refused.value.reason and "docker network rm paiq-tasks" in refused.value.reason


def test_an_isdebug_task_runs_under_the_keeping_wrapper() -> None:
    spec = container_spec(make_spec(is_debug=True), name="c1", node_id="n1", code_dir="",
                          settings=LauncherSettings.from_env({"PAIQ_DEBUG_KEEP_SECONDS": "600"}))
    assert create_args(spec)["command"] == [DEBUG_WRAPPER, "paiq-debug", "python train.py", "600"]
    assert spec.labels["paiq.debug"] == "1"


@pytest.mark.parametrize(("line", "parsed"), [
    ("[paiq] debug: exit code 3; container kept for 600 s\n", (3, 600)),
    ("[paiq] debug: exit code 127; container kept for 5 s", (127, 5)),
    ("[paiq] debug: exit code 3; container kept for 600 s and more", None),
    ("echo [paiq] debug: exit code 3; container kept for 600 s", None),
    ("", None),
])
def test_the_debug_announcement_is_recognised_exactly(line: str, parsed: tuple[int, int] | None) -> None:
    assert parse_debug_marker(line) == parsed


@pytest.mark.parametrize(("text", "ns"), [
    ("1970-01-01T00:00:01Z", 1_000_000_000),
    ("2026-11-20T22:07:06.123456789Z", 1795212426_123456789),
    ("2026-11-20T22:07:06.5Z", 1795212426_500000000),  # the engine trims trailing zeros
])
def test_engine_timestamps_to_nanoseconds(text: str, ns: int) -> None:
    assert engine_time_ns(text) == ns


@pytest.mark.parametrize(("text", "code"), [
    ('OCI runtime create failed: exec: "/bin/sh": stat /bin/sh: no such file or directory: unknown', -1203),
    ('exec: "/bin/sh": executable file not found in $PATH', -1203),
    ("OCI runtime create failed: exec /bin/sh: permission denied", -1202),
    ("could not select device driver \"nvidia\" with capabilities: [[gpu]]", 125),
])
def test_engine_start_failures(text: str, code: int) -> None:
    assert start_failure(text)[0] == code


@pytest.mark.parametrize(("devices", "requested"), [("nvidia", ["0", "3"]), ("none", None)])
def test_a_tasks_gpus_go_to_its_container_unless_they_are_only_declared(devices: str, requested: object) -> None:
    spec = container_spec(make_spec(gpus=(0, 3)), name="c", node_id="n1", code_dir="",
                          settings=LauncherSettings.from_env({"PAIQ_GPU_DEVICES": devices}))
    args = create_args(spec)
    got = [r["DeviceIDs"] if isinstance(r, dict) else r.device_ids for r in args.get("device_requests", [])]
    assert (got[0] if got else None) == requested
