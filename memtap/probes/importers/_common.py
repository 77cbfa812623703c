"""What every importer shares: reading records with their place, reporting malformed ones."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memtap.probes.errors import Problem, SuiteError, SuiteInvalid
from memtap.probes.schema import FORMAT, Episode
from memtap.probes.suitefile import check_record, parse_records

__all__ = [
    "FORMAT",
    "ImportResult",
    "Malformed",
    "Record",
    "convert_all",
    "iso",
    "object_or_empty",
    "read_json_records",
    "require",
]

Record = tuple[str, Any]
"""(place, parsed record) — or (place, Problem) when the record could not be parsed."""


class Malformed(Exception):
    """A source record that cannot be converted: which field, and what is wrong with it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def require(record: Any, key: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    """``record[key]`` if it is there and of ``kind``, else :class:`Malformed`."""
    name = f"{where}.{key}" if where else key
    if not isinstance(record, dict):
        raise Malformed(where or "record", f"expected an object, got {type(record).__name__}")
    if key not in record:
        raise Malformed(name, "missing")
    value = record[key]
    if not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise Malformed(name, f"expected {expected}, got {type(value).__name__}")
    return value


def object_or_empty(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (for optional nested sections)."""
    return value if isinstance(value, dict) else {}


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _read(path: Path) -> str:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                return fh.read()
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SuiteError(f"no file at {path}") from None
    except IsADirectoryError:
        raise SuiteError(f"{path} is a folder; this importer reads a file") from None
    except (UnicodeDecodeError, OSError) as exc:
        raise SuiteError(f"cannot read {path}: {exc}") from None


def read_json_records(path: Path) -> Iterator[Record]:
    """Records of a JSON Lines file, a JSON array, or one JSON object (``.gz`` too)."""
    name = str(path)
    suffix = Path(path.name.removesuffix(".gz")).suffix
    yield from parse_records(name, _read(path), suffix)


@dataclass
class ImportResult:
    episodes: list[Episode]
    skipped: list[Problem] = field(default_factory=list)


def convert_all(
    source: str,
    records: Iterator[Record],
    convert: Callable[[Any, str], Sequence[dict[str, Any] | Problem]],
    *,
    skip_malformed: bool = False,
) -> ImportResult:
    """Convert each source record into episodes and validate them against the suite schema.

    A record that cannot be converted, or whose episode does not validate, is reported with
    its place (as is a part of a record the importer reports as a :class:`Problem`); with
    ``skip_malformed`` it is left out and listed in ``skipped``, otherwise
    the import fails listing every such record.
    """
    episodes: list[Episode] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    for where, record in records:
        if isinstance(record, Problem):
            problems.append(record)
            continue
        name = _record_name(record)
        try:
            converted = convert(record, where)
        except Malformed as exc:
            problems.append(Problem(where, f"malformed record: {exc.message}", name, exc.field))
            continue
        for data in converted:
            if isinstance(data, Problem):  # a part of the record the importer had to leave out
                problems.append(data)
                continue
            episode, found = check_record(where, data)
            if episode is not None and episode.episode_id in seen:
                found.append(Problem(where, "duplicate episode id", episode.episode_id, "episode_id"))
            if found or episode is None:
                problems.extend(found)
                continue
            seen.add(episode.episode_id)
            episodes.append(episode)
    if problems and not skip_malformed:
        raise SuiteInvalid(f"{source} (pass --skip-malformed to import the rest)", problems)
    if not episodes:
        problems.append(Problem(source, "no episode could be imported"))
        raise SuiteInvalid(source, problems)
    return ImportResult(episodes, problems)


def _record_name(record: Any) -> str | None:
    if isinstance(record, dict):
        for key in ("episode_id", "sample_id", "question_id", "instance_id", "session_id"):
            if isinstance(record.get(key), str):
                return str(record[key])
    return None
