"""``memtap report``: one run's score as a single self-contained HTML file.

The stylesheet, the chart script and the vendored Chart.js are inlined, so the file opens with
no network and no server (attach it to a pull request or a paper's artifact).
"""

from __future__ import annotations

import re
from pathlib import Path

from markupsafe import Markup

from memtap.errors import ConfigError
from memtap.ui.app import HERE, environment
from memtap.ui.charts import headline_rows, score_charts
from memtap.ui.hw import run_energy
from memtap.ui.queries import Reader

__all__ = ["render_report"]


def _inline_script(name: str) -> Markup:
    text = (HERE / "static" / name).read_text(encoding="utf-8")
    # A script element ends at the first "</script": never let a file's text close it early.
    return Markup(re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE))


def render_report(db: str | Path, run_id: str) -> str:
    """The HTML of run ``run_id``'s latest score in the trace file ``db``."""
    reader = Reader(db)
    run = reader.run(run_id)
    if run is None:
        raise ConfigError(f"no run {run_id!r} in {db}")
    score = run["score"]
    if score is None:
        raise ConfigError(f"run {run_id!r} has no score yet: run `memtap score {run_id} --db {db}` first")
    return (
        environment()
        .get_template("report.html")
        .render(
            run=run,
            score=score,
            headline=headline_rows(score),
            charts=score_charts(score),
            energy=run_energy(reader, run),
            css=Markup((HERE / "static" / "style.css").read_text(encoding="utf-8")),
            chart_js=_inline_script("vendor/chart.umd.min.js"),
            charts_js=_inline_script("charts.js"),
            licence=(HERE / "static" / "vendor" / "chart.js-LICENSE.md").read_text(encoding="utf-8"),
        )
    )
