"""The ``--from-trace`` selection options shared by ``memtap suite from-trace`` and ``memtap replay``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click

from memtap.errors import ConfigError

__all__ = ["freeze", "selection_options"]

F = TypeVar("F", bound=Callable[..., Any])


def _when(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ConfigError(
            f"{option} {value!r} is not an ISO 8601 time (e.g. 2026-12-01T14:00:00+00:00)"
        ) from None
    if moment.tzinfo is None:
        from datetime import UTC

        moment = moment.replace(tzinfo=UTC)
    return moment


def selection_options(run_flag: str) -> Callable[[F], F]:
    """``run_flag`` (``--run`` or ``--from-run``), ``--namespace``, ``--since``, ``--until``."""

    def decorate(func: F) -> F:
        for option in reversed(
            [
                click.option(
                    run_flag, "from_run", metavar="RUN", help="Only the events of this recorded run."
                ),
                click.option(
                    "--namespace", "from_namespace", metavar="NS", help="Only this namespace's events."
                ),
                click.option(
                    "--since", "since", metavar="TIME", help="Only events at or after this ISO time."
                ),
                click.option(
                    "--until", "until", metavar="TIME", help="Only events at or before this ISO time."
                ),
            ]
        ):
            func = option(func)
        return func

    return decorate


def freeze(
    db: Path, run: str | None, namespace: str | None, since: str | None, until: str | None
) -> tuple[list[Any], dict[str, int]]:
    """The selection's episodes, and what the suite format could not carry (counts by kind)."""
    from memtap.probes.from_trace import TraceSelection, episodes_from_trace

    selection = TraceSelection(db, run, namespace, _when(since, "--since"), _when(until, "--until"))
    episodes = episodes_from_trace(selection)
    return episodes, selection.not_carried
