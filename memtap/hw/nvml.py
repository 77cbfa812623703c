"""The NVIDIA GPUs, through NVIDIA's official NVML bindings (``nvidia-ml-py``, imported as
``pynvml``).

``open_nvml()`` returns the source, or ``None`` and the one line the probe prints when there is
no driver or no device. Each reading is one NVML call; a call that fails leaves its field empty
and names the failure in the sample's ``error`` (a lost device, a permission error), and the
next tick tries again. ``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since the driver
loaded; Volta and later) is read where the device has it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from memtap.hw.sources import DeviceInfo, Sample

__all__ = ["NvmlSource", "open_nvml"]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def open_nvml() -> tuple[NvmlSource | None, str]:
    """The NVML source, or None with why: ``no NVIDIA driver (NVML: ...)`` or ``no device``."""
    try:
        import pynvml
    except ImportError as exc:
        return None, f"no NVIDIA driver (NVML bindings not installed: {exc}; pip install memtap[gpu])"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"no NVIDIA driver (NVML: {exc})"
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        pynvml.nvmlShutdown()
        return None, f"no device (NVML: {exc})"
    if count == 0:
        pynvml.nvmlShutdown()
        return None, "no device (NVML found no NVIDIA GPU)"
    source = NvmlSource(count)
    names = ", ".join(d.name for d in source.describe())
    return source, f"{count} NVIDIA GPU(s): {names}; driver {source.driver}"


class NvmlSource:
    """Every GPU NVML sees; NVML must be initialised (``open_nvml`` does it)."""

    def __init__(self, count: int) -> None:
        import pynvml

        self._nv = pynvml
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.driver = _text(self._try([], "driver", pynvml.nvmlSystemGetDriverVersion))
        self._has_energy = [
            self._try([], "energy", pynvml.nvmlDeviceGetTotalEnergyConsumption, h) is not None
            for h in self.handles
        ]

    def _try(self, errors: list[str], what: str, read: Callable[..., Any], *args: Any) -> Any:
        try:
            return read(*args)
        except self._nv.NVMLError as exc:
            errors.append(f"{what}: {exc}")
            return None

    def describe(self) -> list[DeviceInfo]:
        nv = self._nv
        out = []
        for i, h in enumerate(self.handles):
            errors: list[str] = []
            memory = self._try(errors, "memory", nv.nvmlDeviceGetMemoryInfo, h)
            limit = self._try(errors, "power limit", nv.nvmlDeviceGetPowerManagementLimit, h)
            uuid = self._try(errors, "uuid", nv.nvmlDeviceGetUUID, h)
            name = self._try(errors, "name", nv.nvmlDeviceGetName, h)
            info = {
                "index": i,
                "uuid": None if uuid is None else _text(uuid),
                "driver": self.driver,
                "memory_total_mb": None if memory is None else round(memory.total / 2**20),
                "power_limit_w": None if limit is None else limit / 1000,
                "energy_counter": self._has_energy[i],
                "errors": errors,
            }
            out.append(DeviceInfo(f"gpu{i}", "gpu", f"GPU {i}" if name is None else _text(name), info))
        return out

    def sample(self) -> list[Sample]:
        nv = self._nv
        out = []
        for i, h in enumerate(self.handles):
            errors: list[str] = []
            s = Sample(f"gpu{i}", time.time())
            power = self._try(errors, "power", nv.nvmlDeviceGetPowerUsage, h)
            s.power_w = None if power is None else power / 1000
            if self._has_energy[i]:
                energy = self._try(errors, "energy", nv.nvmlDeviceGetTotalEnergyConsumption, h)
                s.energy_j = None if energy is None else energy / 1000
            util = self._try(errors, "utilization", nv.nvmlDeviceGetUtilizationRates, h)
            if util is not None:
                s.gpu_util, s.mem_util = float(util.gpu), float(util.memory)
            memory = self._try(errors, "memory", nv.nvmlDeviceGetMemoryInfo, h)
            s.mem_used_mb = None if memory is None else round(memory.used / 2**20, 1)
            temp = self._try(errors, "temperature", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
            s.temp_c = None if temp is None else float(temp)
            sm = self._try(errors, "sm clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
            s.sm_clock_mhz = None if sm is None else float(sm)
            mem = self._try(errors, "memory clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
            s.mem_clock_mhz = None if mem is None else float(mem)
            s.error = "; ".join(errors) or None
            out.append(s)
        return out

    def close(self) -> None:
        with contextlib.suppress(self._nv.NVMLError):
            self._nv.nvmlShutdown()
