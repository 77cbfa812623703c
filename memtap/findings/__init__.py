"""Findings: unsafe deletions, destructive updates and leaks flagged on live traffic, without gold.

Each detector is a small documented rule (docs/findings.md) that sees the trace's events in order;
the same engine runs live (after each recorder commit) and offline (``memtap check``).

The names load on first use (PEP 562): the detector process and a serving process's config import
only the modules they use, not the offline check's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memtap.lazy import load_export

if TYPE_CHECKING:
    from memtap.findings.check import CheckResult, check_trace
    from memtap.findings.engine import DETECTOR_NAMES, Engine, make_detectors
    from memtap.findings.live import LiveFindings
    from memtap.findings.model import DETECTOR_VERSION, Detector, Finding, Severity
    from memtap.findings.settings import FindingsSettings
    from memtap.findings.storage import get_finding, list_findings, save_findings

# Each public name and the module that defines it.
_EXPORTS = {
    "CheckResult": "memtap.findings.check",
    "check_trace": "memtap.findings.check",
    "DETECTOR_NAMES": "memtap.findings.engine",
    "Engine": "memtap.findings.engine",
    "make_detectors": "memtap.findings.engine",
    "LiveFindings": "memtap.findings.live",
    "DETECTOR_VERSION": "memtap.findings.model",
    "Detector": "memtap.findings.model",
    "Finding": "memtap.findings.model",
    "Severity": "memtap.findings.model",
    "FindingsSettings": "memtap.findings.settings",
    "get_finding": "memtap.findings.storage",
    "list_findings": "memtap.findings.storage",
    "save_findings": "memtap.findings.storage",
}

__all__ = [
    "DETECTOR_NAMES",
    "DETECTOR_VERSION",
    "CheckResult",
    "Detector",
    "Engine",
    "Finding",
    "FindingsSettings",
    "LiveFindings",
    "Severity",
    "check_trace",
    "get_finding",
    "list_findings",
    "make_detectors",
    "save_findings",
]


def __getattr__(name: str) -> Any:
    return load_export(__name__, _EXPORTS, globals(), name)


def __dir__() -> list[str]:
    return sorted(__all__)
