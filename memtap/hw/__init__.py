"""The hardware probe: GPU (NVML) and host samples beside ``serve``, ``proxy`` and ``replay``,
stored in the trace database and attributed to calls (docs/hardware.md)."""

from memtap.hw.attribution import Point, Segment, Share, attribute, baseline_rate, integrate, segments
from memtap.hw.figures import HwRuns, chat_figures, replay_figures
from memtap.hw.nvml import NvmlSource, open_nvml
from memtap.hw.probe import HwProbe, default_sources, hw_probe
from memtap.hw.sampler import DEFAULT_INTERVAL_MS, MIN_INTERVAL_MS, Sampler, check_interval
from memtap.hw.sources import DeviceInfo, HostSource, HwError, HwSourceError, ReplaySource, Sample, Source

__all__ = [
    "DEFAULT_INTERVAL_MS",
    "MIN_INTERVAL_MS",
    "DeviceInfo",
    "HostSource",
    "HwError",
    "HwProbe",
    "HwRuns",
    "HwSourceError",
    "NvmlSource",
    "Point",
    "ReplaySource",
    "Sample",
    "Sampler",
    "Segment",
    "Share",
    "Source",
    "attribute",
    "baseline_rate",
    "chat_figures",
    "check_interval",
    "default_sources",
    "hw_probe",
    "integrate",
    "open_nvml",
    "replay_figures",
    "segments",
]
