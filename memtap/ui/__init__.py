"""The dashboards: a read-only web dashboard over a trace file (``memtap ui``, and ``/ui`` in
``memtap serve``/``memtap proxy``) and the self-contained run report (``memtap report``)."""

from memtap.ui.app import create_ui_app
from memtap.ui.report import render_report

__all__ = ["create_ui_app", "render_report"]
