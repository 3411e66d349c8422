"""The node's NVIDIA GPUs through NVML (the ``nvidia-ml-py`` package, module ``pynvml``): which devices there
are, and each one's utilisation and memory in use.

The only module of paiq that imports ``pynvml``, and only when :meth:`NvmlGpus.open` is called, so that
nothing else needs it. What this module asks of the library is the :class:`NvmlApi` protocol; tests give
:meth:`NvmlGpus.open` a recorded stand-in for it, so the real path (handles, name decoding, errors) runs
without a GPU.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Protocol, cast

from services.launcher.engine.enginestats import GpuReading
from shared.scheduling.gpuinventory import NvmlDevice

# NVML's return codes (nvml.h) that explain why it cannot be used on this node.
_WHY = {
    12: "no NVIDIA driver found",  # NVML_ERROR_LIBRARY_NOT_FOUND: libnvidia-ml.so.1 is not there
    9: "the NVIDIA driver is not loaded",  # NVML_ERROR_DRIVER_NOT_LOADED
    4: "NVML may not be used by this user",  # NVML_ERROR_NO_PERMISSION
    18: "the NVIDIA driver and its NVML library differ in version",  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
}


class NvmlMemory(Protocol):
    @property
    def total(self) -> int: ...
    @property
    def used(self) -> int: ...


class NvmlUtilization(Protocol):
    @property
    def gpu(self) -> int: ...


class NvmlApi(Protocol):
    """What paiq uses of ``pynvml`` (the names are the library's)."""

    NVMLError: type[Exception]  # the base of every error it raises; each has the return code as ``value``

    def nvmlInit(self) -> None: ...  # noqa: N802
    def nvmlShutdown(self) -> None: ...  # noqa: N802
    def nvmlDeviceGetCount(self) -> int: ...  # noqa: N802
    def nvmlDeviceGetHandleByIndex(self, index: int) -> object: ...  # noqa: N802
    def nvmlDeviceGetName(self, handle: object) -> str | bytes: ...  # noqa: N802  (bytes before 11.5)
    def nvmlDeviceGetUUID(self, handle: object) -> str | bytes: ...  # noqa: N802
    def nvmlDeviceGetMemoryInfo(self, handle: object) -> NvmlMemory: ...  # noqa: N802
    def nvmlDeviceGetUtilizationRates(self, handle: object) -> NvmlUtilization: ...  # noqa: N802


def load_pynvml() -> NvmlApi:
    """The ``pynvml`` module (ImportError when nvidia-ml-py is not installed)."""
    return cast(NvmlApi, importlib.import_module("pynvml"))


def why_not(error: Exception) -> str:
    """An NVML error as a cause an operator understands: "no NVIDIA driver found (NVML: ...)"."""
    code = getattr(error, "value", None)
    cause = _WHY.get(code, "NVML cannot be used") if isinstance(code, int) else "NVML cannot be used"
    return f"{cause} (NVML: {error})"


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class NvmlGpus:
    """An open NVML session and the handles of the node's devices, by index; a :class:`GpuReader`."""

    def __init__(self, api: NvmlApi, handles: dict[int, object]) -> None:
        self._api = api
        self._handles = handles
        self._open = True

    @classmethod
    def open(cls, api: NvmlApi | None = None) -> NvmlGpus | str:
        """NVML started and the devices' handles taken, or why not (library missing, driver not loaded,
        no device). ``api``: the library (``pynvml`` when not given)."""
        if api is None:
            try:
                api = load_pynvml()
            except ImportError as e:
                return f"the nvidia-ml-py package is not installed ({e})"
        try:
            api.nvmlInit()
        except api.NVMLError as e:
            return why_not(e)
        try:
            handles = _handles(api, api.nvmlDeviceGetCount())
        except api.NVMLError as e:
            _shutdown(api)
            return why_not(e)
        if not handles:
            _shutdown(api)
            return "NVML finds no GPU"
        return cls(api, handles)

    def devices(self) -> tuple[NvmlDevice, ...]:
        """What NVML reports of each device (a device that errors is left out)."""
        found: list[NvmlDevice] = []
        for index, handle in self._handles.items():
            try:
                found.append(NvmlDevice(
                    index=index, uuid=_text(self._api.nvmlDeviceGetUUID(handle)),
                    name=_text(self._api.nvmlDeviceGetName(handle)).strip(),
                    memory_total_bytes=int(self._api.nvmlDeviceGetMemoryInfo(handle).total)))
            except self._api.NVMLError:
                continue
        return tuple(found)

    def read(self) -> dict[int, GpuReading]:
        """Every device's utilisation and memory in use now, by index (a device that errors is left out)."""
        readings: dict[int, GpuReading] = {}
        for index, handle in self._handles.items():
            try:
                busy = self._api.nvmlDeviceGetUtilizationRates(handle).gpu
                used = self._api.nvmlDeviceGetMemoryInfo(handle).used
            except self._api.NVMLError:
                continue
            readings[index] = GpuReading(index=index, utilization_percent=float(busy), memory_used_bytes=int(used))
        return readings

    def close(self) -> None:
        """NVML shut down (once; a second call does nothing)."""
        if self._open:
            self._open = False
            _shutdown(self._api)


def _handles(api: NvmlApi, count: int) -> dict[int, object]:
    """The handle of each device by index; a device whose handle NVML refuses (lost, no permission) is left
    out, as it would fail every reading."""
    handles: dict[int, object] = {}
    for index in range(count):
        try:
            handles[index] = api.nvmlDeviceGetHandleByIndex(index)
        except api.NVMLError:
            continue
    return handles


def _shutdown(api: NvmlApi) -> None:
    with contextlib.suppress(api.NVMLError):  # not initialised, or the driver went away: nothing to release
        api.nvmlShutdown()
