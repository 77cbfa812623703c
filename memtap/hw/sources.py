"""What the hardware probe samples: the ``Source`` protocol, its sample and device records, and
the sources that need no GPU (the host, and a recorded series replayed from a file).

A source describes its devices once (``describe``) and returns one ``Sample`` per device each
time it is asked (``sample``). A source may raise on any call; the sampler records the gap and
goes on. The NVML source is in ``nvml.py``.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from memtap.errors import MemtapError

__all__ = [
    "SAMPLE_FIELDS",
    "DeviceInfo",
    "HostSource",
    "HwError",
    "HwSourceError",
    "ReplaySource",
    "Sample",
    "Source",
]


class HwError(MemtapError):
    """Base of the hardware probe's errors (bad options, unreadable sample files)."""


class HwSourceError(HwError):
    """A source could not deliver a sample (a device lost, a permission error); ``ts``: when."""

    def __init__(self, message: str, ts: float | None = None) -> None:
        super().__init__(message)
        self.ts = ts


@dataclass(frozen=True)
class DeviceInfo:
    """One sampled device, described once per run: ``device`` is its key in the samples
    (``host``, ``gpu0``, ...), ``kind`` is ``host`` or ``gpu``."""

    device: str
    kind: str
    name: str
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sample:
    """One reading of one device at ``ts`` (Unix seconds). Counters (``energy_j``, ``cpu_busy_s``,
    ``proc_cpu_s``) only grow; rates (``power_w``) are instantaneous. ``error`` marks a gap."""

    device: str
    ts: float
    power_w: float | None = None
    energy_j: float | None = None
    gpu_util: float | None = None
    mem_util: float | None = None
    mem_used_mb: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    cpu_util: float | None = None
    cpu_busy_s: float | None = None
    proc_cpu_s: float | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


SAMPLE_FIELDS = tuple(f.name for f in fields(Sample))


@runtime_checkable
class Source(Protocol):
    """Something the sampler reads: describe the devices once, then sample them."""

    def describe(self) -> list[DeviceInfo]: ...

    def sample(self) -> list[Sample]: ...

    def close(self) -> None: ...


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read_proc_stat(path: Path) -> tuple[float, float] | None:
    """(busy, total) seconds of all CPUs since boot from the first line of /proc/stat."""
    try:
        first = path.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if first[0] != "cpu":
        return None
    ticks = [int(v) for v in first[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    total = sum(ticks[:8])  # guest time is already counted in user and nice
    return (total - idle) / _CLK_TCK, total / _CLK_TCK


class HostSource:
    """The host: CPU utilisation from ``/proc/stat`` (no extra dependency; psutil reads the same
    file) and this process's CPU time (``time.process_time``, every thread). ``cpu_busy_s`` is
    the busy core-seconds since boot, a counter, so a call's host CPU is a difference of two
    readings rather than an integral of a rate."""

    def __init__(self, proc_stat: Path = Path("/proc/stat")) -> None:
        self.proc_stat = proc_stat
        self._last = _read_proc_stat(proc_stat)

    def describe(self) -> list[DeviceInfo]:
        info = {
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "proc_stat": self._last is not None,
        }
        return [DeviceInfo("host", "host", platform.processor() or platform.machine(), info)]

    def sample(self) -> list[Sample]:
        now = _read_proc_stat(self.proc_stat)
        util = None
        if now is not None and self._last is not None and now[1] > self._last[1]:
            util = round(100.0 * (now[0] - self._last[0]) / (now[1] - self._last[1]), 2)
        if now is not None:
            self._last = now
        return [
            Sample(
                "host",
                time.time(),
                cpu_util=util,
                cpu_busy_s=None if now is None else now[0],
                proc_cpu_s=time.process_time(),
            )
        ]

    def close(self) -> None:
        return None


class ReplaySource:
    """A recorded series of samples played back from a JSON Lines file, one tick per ``sample()``.

    Lines: ``{"device": {...DeviceInfo...}}`` describes a device; a sample line holds the
    ``Sample`` fields (``device`` and ``ts`` required); consecutive sample lines with the same
    ``ts`` form one tick; ``{"ts": T, "raise": "message"}`` makes that tick's ``sample()`` raise
    ``HwSourceError`` (a device lost mid-run). After the last tick ``sample()`` returns nothing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.devices: list[DeviceInfo] = []
        self.ticks: list[list[Sample] | tuple[float | None, str]] = []
        try:
            lines = path.read_text().splitlines()
        except OSError as exc:
            raise HwError(f"cannot read sample file {path}: {exc.strerror}") from exc
        last_ts: float | None = None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if "device" in row and isinstance(row["device"], dict):
                    self.devices.append(DeviceInfo(**row["device"]))
                    continue
                if "raise" in row:
                    self.ticks.append((row.get("ts"), str(row["raise"])))
                    last_ts = None
                    continue
                sample = Sample(**row)
            except (ValueError, TypeError) as exc:
                raise HwError(f"{path}:{number}: not a sample: {exc}") from exc
            if last_ts == sample.ts and self.ticks and isinstance(self.ticks[-1], list):
                self.ticks[-1].append(sample)
            else:
                self.ticks.append([sample])
            last_ts = sample.ts
        self._next = 0

    def describe(self) -> list[DeviceInfo]:
        return list(self.devices)

    def sample(self) -> list[Sample]:
        if self._next >= len(self.ticks):
            return []
        tick = self.ticks[self._next]
        self._next += 1
        if isinstance(tick, tuple):
            raise HwSourceError(tick[1], tick[0])
        return [Sample(**asdict(s)) for s in tick]

    @property
    def exhausted(self) -> bool:
        return self._next >= len(self.ticks)

    def close(self) -> None:
        return None
