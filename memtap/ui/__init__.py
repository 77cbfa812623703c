"""The dashboards: a read-only web dashboard over a trace file (``memtap ui``, and ``/ui`` in
``memtap serve``/``memtap proxy``) and the self-contained run report (``memtap report``).

The names load on first use (PEP 562): a server imports :mod:`memtap.ui.mount` without the pages."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memtap.lazy import load_export

if TYPE_CHECKING:
    from memtap.ui.app import create_ui_app
    from memtap.ui.report import render_report

_EXPORTS = {"create_ui_app": "memtap.ui.app", "render_report": "memtap.ui.report"}

__all__ = ["create_ui_app", "render_report"]


def __getattr__(name: str) -> Any:
    return load_export(__name__, _EXPORTS, globals(), name)


def __dir__() -> list[str]:
    return sorted(__all__)
