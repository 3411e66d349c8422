"""GPU discovery: NVML's device names mapped to gpuTypes, the choice between a declared and a discovered
inventory, and the NVML shell (services/launcher/profiling/nvml.py) run against a recorded stand-in for pynvml.

The device names are those NVML reports (nvmlDeviceGetName), the memory totals those of
nvmlDeviceGetMemoryInfo(h).total on such devices, and the UUIDs have NVML's format.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from structlog.testing import capture_logs

from services.launcher.profiling.gpureader import GpuReader
from services.launcher.profiling.gpus import NOT_OPENED, discover
from services.launcher.profiling.nvml import NvmlGpus, load_pynvml, why_not
from shared.records import GpuInfo
from shared.scheduling.gpuinventory import NodeGpus, NvmlDevice, choose, gpu_type, inventory
from shared.settings.model import Settings

pytestmark = pytest.mark.unit

NVML = load_pynvml()  # the real library: its errors are what the stand-in raises
H100 = "NVIDIA H100 80GB HBM3"
H100_BYTES = 85520809984
A100_40 = "NVIDIA A100-SXM4-40GB"
A100_40_BYTES = 42949672960
V100 = "Tesla V100-SXM2-16GB"
V100_BYTES = 17179869184
T4 = "Tesla T4"
T4_BYTES = 16106127360
K80 = "Tesla K80"
K80_BYTES = 11996954624


def make_device(index: int, name: str = H100, memory: int = H100_BYTES) -> NvmlDevice:
    return NvmlDevice(index=index, uuid=f"GPU-5e3c1a2b-7f4d-11ee-b962-0242ac12000{index}", name=name,
                      memory_total_bytes=memory)


# ---- gpu_type -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "expected"), [
    (H100, "H100"),
    ("NVIDIA H100 PCIe", "H100"),
    ("NVIDIA H100 NVL", "H100"),
    (V100, "V100"),
    ("Tesla V100-PCIE-32GB", "V100"),
    ("Tesla V100S-PCIE-32GB", "V100S"),
    ("NVIDIA A100-SXM4-80GB", "A100"),
    (A100_40, "A100"),
    ("NVIDIA A100 80GB PCIe", "A100"),
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "A100"),
    (K80, "K80"),
    (T4, "T4"),
    ("NVIDIA GeForce RTX 3090", "RTX3090"),
    ("NVIDIA GeForce RTX 3090 Ti", "RTX3090Ti"),
    ("NVIDIA GeForce RTX 3080 Laptop GPU", "RTX3080"),
    ("NVIDIA GeForce GTX 1080 Ti", "GTX1080Ti"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA A10G", "A10G"),
    ("NVIDIA A10", "A10"),
    ("Tesla P100-PCIE-16GB", "P100"),
    ("NVIDIA RTX A6000", "A6000"),
    ("Quadro RTX 8000", "RTX8000"),
    ("Quadro P6000", "P6000"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX6000Ada"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA TITAN V", "TITANV"),
    ("tesla v100-sxm2-16gb", "V100"),  # a hand-typed name
])
def test_gpu_type_of_nvml_names(name: str, expected: str) -> None:
    assert gpu_type(name) == expected


@pytest.mark.parametrize(("name", "expected"), [
    ("NVIDIA", "NVIDIA"),  # nothing but a brand: the name itself
    ("", "GPU"),
    ("--", "GPU"),
    ("NVIDIA Graphics Device", "GraphicsDevice"),  # a device newer than the driver's name table
    ("NVIDIA Experimental Accelerator Board Revision Two Engineering Sample", "ExperimentalAcceleratorBoardRevi"),
    ("NVIDIA/Tesla", "NVIDIATesla"),
])
def test_gpu_type_is_never_empty_and_safe(name: str, expected: str) -> None:
    kind = gpu_type(name)
    assert kind == expected
    assert 0 < len(kind) <= 32
    assert all(c.isascii() and (c.isalnum() or c in "_-") for c in kind)


# ---- inventory ------------------------------------------------------------------------------------------

def test_inventory_maps_each_device_by_index() -> None:
    devices = (make_device(1, A100_40, A100_40_BYTES), make_device(0, H100, H100_BYTES),
               make_device(2, V100, V100_BYTES), make_device(3, T4, T4_BYTES), make_device(4, K80, K80_BYTES))
    assert inventory(devices) == (
        GpuInfo(index=0, type="H100", uuid=devices[1].uuid, model=H100, memory_mb=81559),
        GpuInfo(index=1, type="A100", uuid=devices[0].uuid, model=A100_40, memory_mb=40960),
        GpuInfo(index=2, type="V100", uuid=devices[2].uuid, model=V100, memory_mb=16384),
        GpuInfo(index=3, type="T4", uuid=devices[3].uuid, model=T4, memory_mb=15360),
        GpuInfo(index=4, type="K80", uuid=devices[4].uuid, model=K80, memory_mb=11441),
    )


def test_old_gpu_documents_stay_readable() -> None:
    assert GpuInfo.model_validate({"index": 0, "type": "V100"}) == GpuInfo(index=0, type="V100", uuid="", model="",
                                                                            memory_mb=0)


# ---- choose ---------------------------------------------------------------------------------------------

NO_DRIVER = "no NVIDIA driver found (NVML: NVML Shared Library Not Found)"


def test_declared_and_no_nvml_uses_the_declaration_unchecked() -> None:
    chosen = choose(((0, "V100"), (1, "V100")), None, NO_DRIVER)
    assert chosen == NodeGpus(
        gpus=(GpuInfo(index=0, type="V100"), GpuInfo(index=1, type="V100")), source="declared", mismatch=False,
        note="PAIQ_NODE_GPUS declares 2 GPUs (0:V100, 1:V100) and they are used unchecked: " + NO_DRIVER)


def test_declared_with_nvml_not_opened_says_so() -> None:
    chosen = choose(((0, "V100"),), None, NOT_OPENED)
    assert chosen.note == f"PAIQ_NODE_GPUS declares 1 GPU (0:V100) and they are used unchecked: {NOT_OPENED}"


def test_declared_and_found_alike_is_enriched() -> None:
    found = (make_device(0, V100, V100_BYTES), make_device(1, V100, V100_BYTES))
    chosen = choose(((0, "v100"), (1, "v100")), found, "")  # the operator's spelling is kept
    assert chosen.source == "declared"
    assert not chosen.mismatch
    assert chosen.gpus == (
        GpuInfo(index=0, type="v100", uuid=found[0].uuid, model=V100, memory_mb=16384),
        GpuInfo(index=1, type="v100", uuid=found[1].uuid, model=V100, memory_mb=16384),
    )
    assert chosen.note == ("PAIQ_NODE_GPUS declares 2 GPUs (0:v100, 1:v100), as NVML finds them: "
                           "the declaration is used, with NVML's UUIDs and memory")


def test_declared_and_found_otherwise_names_the_mismatch() -> None:
    found = tuple(make_device(i) for i in range(4))
    chosen = choose(((0, "V100"), (1, "V100")), found, "")
    assert chosen.mismatch
    assert chosen.source == "declared"
    assert [(g.type, g.model, g.memory_mb) for g in chosen.gpus] == [("V100", H100, 81559)] * 2
    assert chosen.note == ("PAIQ_NODE_GPUS declares 2 GPUs (0:V100, 1:V100); NVML finds 4 (H100): "
                           "the declaration is used")


def test_declared_beyond_the_found_devices_keeps_them_unenriched() -> None:
    found = (make_device(0, A100_40, A100_40_BYTES), make_device(1, T4, T4_BYTES))
    chosen = choose(((0, "A100"), (1, "T4"), (2, "T4")), found, "")
    assert chosen.mismatch
    assert chosen.gpus[2] == GpuInfo(index=2, type="T4")
    assert chosen.gpus[1].uuid == found[1].uuid
    assert chosen.note == ("PAIQ_NODE_GPUS declares 3 GPUs (0:A100, 1:T4, 2:T4); NVML finds 2 (A100, T4): "
                           "the declaration is used")


def test_declared_and_nvml_finds_none() -> None:
    chosen = choose(((0, "K80"),), (), "")
    assert chosen.mismatch
    assert chosen.gpus == (GpuInfo(index=0, type="K80"),)
    assert chosen.note == "PAIQ_NODE_GPUS declares 1 GPU (0:K80); NVML finds none: the declaration is used"


def test_nothing_declared_offers_what_nvml_finds() -> None:
    found = (make_device(0), make_device(1))
    chosen = choose((), found, "")
    assert chosen == NodeGpus(gpus=inventory(found), source="discovered", mismatch=False,
                              note="NVML finds 2 GPUs, offered as 0:H100, 1:H100 (NVIDIA H100 80GB HBM3); "
                                   "PAIQ_NODE_GPUS declares none")


def test_nothing_declared_mixed_models_are_all_named() -> None:
    chosen = choose((), (make_device(0, T4, T4_BYTES), make_device(1, K80, K80_BYTES)), "")
    assert chosen.note == ("NVML finds 2 GPUs, offered as 0:T4, 1:K80 (Tesla T4, Tesla K80); "
                           "PAIQ_NODE_GPUS declares none")


@pytest.mark.parametrize(("discovered", "why", "reason"), [
    (None, NO_DRIVER, NO_DRIVER),
    (None, NOT_OPENED, NOT_OPENED),
    ((), "", "NVML finds no GPU"),
])
def test_nothing_declared_nor_found_offers_none(discovered: tuple[NvmlDevice, ...] | None, why: str,
                                                reason: str) -> None:
    assert choose((), discovered, why) == NodeGpus(
        gpus=(), source="none", note=f"{reason}; this node offers no GPUs (declare them with PAIQ_NODE_GPUS)")


# ---- the NVML shell, against a recorded stand-in for pynvml ------------------------------------------

@dataclass(frozen=True)
class Memory:  # c_nvmlMemory_t
    total: int
    free: int
    used: int


@dataclass(frozen=True)
class Utilization:  # c_nvmlUtilization_t
    gpu: int
    memory: int


@dataclass(frozen=True)
class Recorded:
    """One device as nvidia-ml-py returned it; an error code makes that call raise the library's error."""

    name: str | bytes  # bytes: what nvidia-ml-py before 11.5 returns
    uuid: str
    memory: Memory
    utilization: Utilization
    handle_error: int = 0
    uuid_error: int = 0
    utilization_error: int = 0


@dataclass(frozen=True)
class Handle:  # an opaque c_nvmlDevice_t
    index: int


@dataclass
class RecordedNvml:
    """pynvml's functions (those paiq calls), answering recorded values and raising its NVMLError."""

    devices: list[Recorded]
    init_error: int = 0
    count_error: int = 0
    calls: list[str] = field(default_factory=list)
    NVMLError = NVML.NVMLError

    def _fail(self, code: int) -> None:
        if code:
            raise NVML.NVMLError(code)

    def _device(self, handle: object) -> Recorded:
        assert isinstance(handle, Handle), handle
        return self.devices[handle.index]

    def nvmlInit(self) -> None:  # noqa: N802
        self.calls.append("init")
        self._fail(self.init_error)

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._fail(self.count_error)
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> object:  # noqa: N802
        self.calls.append(f"handle {index}")
        self._fail(self.devices[index].handle_error)
        return Handle(index)

    def nvmlDeviceGetName(self, handle: object) -> str | bytes:  # noqa: N802
        return self._device(handle).name

    def nvmlDeviceGetUUID(self, handle: object) -> str | bytes:  # noqa: N802
        device = self._device(handle)
        self._fail(device.uuid_error)
        return device.uuid

    def nvmlDeviceGetMemoryInfo(self, handle: object) -> Memory:  # noqa: N802
        return self._device(handle).memory

    def nvmlDeviceGetUtilizationRates(self, handle: object) -> Utilization:  # noqa: N802
        device = self._device(handle)
        self._fail(device.utilization_error)
        return device.utilization


GPU_IS_LOST = 15
NOT_SUPPORTED = 3
DGX_H100 = [  # two devices of an H100 node: one busy, one idle
    Recorded(H100, "GPU-1f0a4b8c-3e55-9d7b-0c2e-6a9f1d4e7b21", Memory(H100_BYTES, 3_464_495_104, 82_056_314_880),
             Utilization(97, 61)),
    Recorded(H100, "GPU-8b2d6e1f-47a0-c3d9-5e18-2f7c9a0b6d43", Memory(H100_BYTES, 84_952_547_328, 568_262_656),
             Utilization(0, 0)),
]


def open_recorded(nvml: RecordedNvml) -> NvmlGpus:
    opened = NvmlGpus.open(nvml)
    assert isinstance(opened, NvmlGpus), opened
    return opened


def test_devices_and_readings_through_the_kept_handles() -> None:
    nvml = RecordedNvml(list(DGX_H100))
    gpus = open_recorded(nvml)
    reader: GpuReader = gpus
    assert gpus.devices() == (
        NvmlDevice(index=0, uuid=DGX_H100[0].uuid, name=H100, memory_total_bytes=H100_BYTES),
        NvmlDevice(index=1, uuid=DGX_H100[1].uuid, name=H100, memory_total_bytes=H100_BYTES),
    )
    readings = reader.read()
    assert [(r.index, r.utilization_percent, r.memory_used_bytes) for r in readings.values()] == [
        (0, 97.0, 82_056_314_880), (1, 0.0, 568_262_656)]
    reader.read()
    assert nvml.calls == ["init", "handle 0", "handle 1"]  # the handles are taken once, at open
    gpus.close()
    gpus.close()
    assert nvml.calls[-1:] == ["shutdown"]
    assert nvml.calls.count("shutdown") == 1


def test_names_given_as_bytes_are_decoded() -> None:
    old = Recorded(V100.encode(), "GPU-4c8e2a61-0d3f-7b95-e1a4-9f6b2c8d0e37", Memory(V100_BYTES, V100_BYTES, 0),
                   Utilization(0, 0))
    assert open_recorded(RecordedNvml([old])).devices()[0].name == V100


def test_a_failing_device_is_left_out() -> None:
    lost = Recorded(A100_40, "GPU-0", Memory(A100_40_BYTES, 0, 0), Utilization(0, 0), uuid_error=GPU_IS_LOST,
                    utilization_error=NOT_SUPPORTED)
    gpus = open_recorded(RecordedNvml([DGX_H100[0], lost]))
    assert [d.index for d in gpus.devices()] == [0]
    assert list(gpus.read()) == [0]


def test_a_device_without_a_handle_is_left_out() -> None:
    refused = Recorded(T4, "GPU-1", Memory(T4_BYTES, T4_BYTES, 0), Utilization(0, 0), handle_error=GPU_IS_LOST)
    gpus = open_recorded(RecordedNvml([refused, DGX_H100[1]]))
    assert [d.index for d in gpus.devices()] == [1]
    assert list(gpus.read()) == [1]


@pytest.mark.parametrize(("nvml", "why"), [
    (RecordedNvml([], init_error=12), "no NVIDIA driver found (NVML: NVML Shared Library Not Found)"),
    (RecordedNvml([], init_error=9), "the NVIDIA driver is not loaded (NVML: Driver Not Loaded)"),
    (RecordedNvml([], init_error=4), "NVML may not be used by this user (NVML: Insufficient Permissions)"),
    (RecordedNvml([], init_error=999), "NVML cannot be used (NVML: Unknown Error)"),
    (RecordedNvml(list(DGX_H100), count_error=9), "the NVIDIA driver is not loaded (NVML: Driver Not Loaded)"),
    (RecordedNvml([]), "NVML finds no GPU"),
    (RecordedNvml([Recorded(T4, "GPU-2", Memory(T4_BYTES, 0, 0), Utilization(0, 0), handle_error=GPU_IS_LOST)]),
     "NVML finds no GPU"),
])
def test_open_says_why_not(nvml: RecordedNvml, why: str) -> None:
    assert NvmlGpus.open(nvml) == why
    assert nvml.calls[-1] == ("init" if nvml.init_error else "shutdown")  # a started NVML is shut down again


def test_open_without_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> object:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr("services.launcher.profiling.nvml.load_pynvml", missing)
    assert NvmlGpus.open() == "the nvidia-ml-py package is not installed (No module named 'pynvml')"


def test_open_on_this_machine_finds_its_gpus_or_names_the_cause() -> None:
    opened = NvmlGpus.open()
    if isinstance(opened, NvmlGpus):  # a machine with a driver: every device found is read
        try:
            devices = opened.devices()
            assert devices and set(opened.read()) == {d.index for d in devices}
        finally:
            opened.close()
        return
    assert "NVML" in opened
    assert opened.startswith(("no NVIDIA driver found", "the NVIDIA driver", "NVML"))


def test_why_not_of_a_foreign_error() -> None:
    assert why_not(RuntimeError("boom")) == "NVML cannot be used (NVML: boom)"


# ---- discover: settings, NVML and the log line ---------------------------------------------------------

def settings_of(gpus: str, devices: str = "nvidia") -> Settings:
    return Settings.from_env({"PAIQ_NODE_GPUS": gpus, "PAIQ_GPU_DEVICES": devices, "PAIQ_NODE_ID": "gpu-1"})


def test_discover_with_gpu_devices_none_does_not_open_nvml() -> None:
    def never() -> NvmlGpus | str:
        raise AssertionError("NVML opened")

    with capture_logs() as logs:
        chosen, reader = discover(settings_of("2xV100", "none"), never)
    assert reader is None
    assert chosen.source == "declared"
    assert NOT_OPENED in chosen.note
    assert [(e["log_level"], e["event"], e["source"]) for e in logs] == [("info", chosen.note, "declared")]


def test_discover_offers_what_nvml_finds_and_keeps_the_reader() -> None:
    nvml = RecordedNvml(list(DGX_H100))
    with capture_logs() as logs:
        chosen, reader = discover(settings_of(""), lambda: NvmlGpus.open(nvml))
    assert reader is not None
    assert chosen.source == "discovered"
    assert [g.type for g in chosen.gpus] == ["H100", "H100"]
    assert [e["log_level"] for e in logs] == ["info"]
    assert logs[0]["gpus"] == ["0:H100", "1:H100"]
    reader.close()


def test_discover_warns_when_the_declaration_disagrees() -> None:
    nvml = RecordedNvml(list(DGX_H100))
    with capture_logs() as logs:
        chosen, reader = discover(settings_of("0:V100"), lambda: NvmlGpus.open(nvml))
    assert reader is not None  # the declaration is used, and the devices are still read
    assert chosen.mismatch
    assert [(e["log_level"], e["event"]) for e in logs] == [
        ("warning", "PAIQ_NODE_GPUS declares 1 GPU (0:V100); NVML finds 2 (H100): the declaration is used")]


def test_discover_without_nvml_offers_no_gpus() -> None:
    with capture_logs() as logs:
        chosen, reader = discover(settings_of(""), lambda: NO_DRIVER)
    assert reader is None
    assert chosen.source == "none"
    assert logs[0]["event"] == f"{NO_DRIVER}; this node offers no GPUs (declare them with PAIQ_NODE_GPUS)"
