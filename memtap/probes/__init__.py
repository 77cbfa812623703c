"""Suites: the schema, importers of published benchmarks, generators, and replay.

The public names of the suite format and its tools; replay itself is reached through
``memtap replay`` (``memtap.probes.replay``), which needs a serving process.
"""

from __future__ import annotations

from memtap.probes.errors import Problem, ReplayError, SuiteError, SuiteInvalid
from memtap.probes.generators import generate
from memtap.probes.importers import import_file
from memtap.probes.schema import FORMAT, Episode, GoldMemory, Probe, Session, Turn, episode_problems
from memtap.probes.stats import shortcut_baselines, suite_stats
from memtap.probes.suitefile import Suite, load_suite, write_suite

__all__ = [
    "FORMAT",
    "Episode",
    "GoldMemory",
    "Probe",
    "Problem",
    "ReplayError",
    "Session",
    "Suite",
    "SuiteError",
    "SuiteInvalid",
    "Turn",
    "episode_problems",
    "generate",
    "import_file",
    "load_suite",
    "shortcut_baselines",
    "suite_stats",
    "write_suite",
]
