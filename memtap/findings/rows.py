"""A finding's stored columns (``findings`` table, ``storage.py``), worked out apart from the store:
a ``memtap check`` part's process works them out for its findings without importing the store."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from memtap.findings.model import Finding

__all__ = ["KEY", "Columns", "finding_columns"]

KEY = 14  # where the dedupe key is in ``finding_columns``

Columns = tuple[Any, ...]


def _dedupe(finding: Finding) -> str:
    key = json.dumps(
        [finding.kind, finding.event_id, sorted(finding.item_ids), finding.summary, finding.detector_version]
    )
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def finding_columns(finding: Finding) -> Columns:
    """A finding's row but its ``id`` and ``created_at`` (what those columns hold is given when it is
    stored): the JSON columns and the dedupe key, worked out wherever the finding was made (a
    ``memtap check`` part's process works them out beside the others')."""
    return (
        finding.kind,
        finding.severity.label,
        int(finding.severity),
        finding.summary,
        finding.event_id,
        finding.namespace,
        finding.run,
        finding.episode,
        finding.session,
        finding.turn,
        json.dumps(finding.event_ids),
        json.dumps(finding.item_ids),
        json.dumps(finding.evidence, ensure_ascii=False, default=str),
        finding.detector_version,
        _dedupe(finding),
    )
