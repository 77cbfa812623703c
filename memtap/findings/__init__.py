"""Findings: unsafe deletions, destructive updates and leaks flagged on live traffic, without gold.

Each detector is a small documented rule (docs/findings.md) that sees the trace's events in order;
the same engine runs live (after each recorder commit) and offline (``memtap check``).
"""

from memtap.findings.check import CheckResult, check_trace
from memtap.findings.engine import DETECTOR_NAMES, Engine, make_detectors
from memtap.findings.live import LiveFindings
from memtap.findings.model import DETECTOR_VERSION, Detector, Finding, Severity
from memtap.findings.settings import FindingsSettings
from memtap.findings.storage import get_finding, list_findings, save_findings

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
