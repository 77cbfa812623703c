"""Reading and writing suite files: JSON Lines, a JSON array, or YAML; every problem with its place.

Every record keeps where it came from (``suite.jsonl:12``, ``suite.json:40``,
``suite.yaml:7``: the line its episode starts on), so a problem names the file, the
line, the episode and the field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from memtap.probes.errors import Problem, SuiteError, SuiteInvalid
from memtap.probes.schema import Episode, episode_problems

__all__ = [
    "Suite",
    "dump_episode",
    "file_sha256",
    "load_suite",
    "parse_records",
    "pydantic_problems",
    "read_records",
    "write_suite",
]


@dataclass
class Suite:
    path: Path
    episodes: list[Episode]
    sha256: str
    positions: list[str]


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SuiteError(f"no suite file at {path}") from None
    except IsADirectoryError:
        raise SuiteError(f"{path} is a folder, not a suite file") from None
    except UnicodeDecodeError as exc:
        raise SuiteError(f"{path} is not UTF-8 text (byte {exc.start})") from None


def _json_lines(name: str, text: str) -> Iterator[tuple[str, Any]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}:{number}"
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as exc:
            yield where, Problem(where, f"not valid JSON: {exc.msg} (column {exc.colno})")


def _json_array(name: str, text: str) -> Iterator[tuple[str, Any]]:
    """Each element of a top-level JSON array, with the line it starts on."""
    decoder = json.JSONDecoder()
    i = text.index("[") + 1
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] == "]":
            return
        where = f"{name}:{text.count(chr(10), 0, i) + 1}"
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            yield where, Problem(f"{name}:{exc.lineno}", f"not valid JSON: {exc.msg} (column {exc.colno})")
            return
        yield where, value


def _yaml_documents(name: str, text: str) -> Iterator[tuple[str, Any]]:
    import yaml

    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{name}:{mark.line + 1}" if mark is not None else name
        yield where, Problem(where, f"not valid YAML: {getattr(exc, 'problem', None) or exc}")
        return
    for node, document in zip(nodes, documents, strict=True):
        if document is None:
            continue
        if isinstance(document, list) and isinstance(node, yaml.SequenceNode):
            for item_node, item in zip(node.value, document, strict=True):
                yield f"{name}:{item_node.start_mark.line + 1}", item
        else:
            yield f"{name}:{node.start_mark.line + 1}", document


def parse_records(name: str, text: str, suffix: str) -> Iterator[tuple[str, Any]]:
    """(place, record) for every record of a file's text; a record that cannot be parsed is a Problem."""
    suffix = suffix.lower()
    if suffix in (".yaml", ".yml"):
        yield from _yaml_documents(name, text)
        return
    stripped = text.lstrip()
    if suffix in (".jsonl", ".ndjson") or not stripped:
        yield from _json_lines(name, text)
    elif stripped.startswith("["):
        yield from _json_array(name, text)
    else:
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            yield from _json_lines(name, text)
            return
        yield f"{name}:{text.count(chr(10), 0, len(text) - len(stripped)) + 1}", whole


def read_records(path: Path) -> Iterator[tuple[str, Any]]:
    yield from parse_records(str(path), _read_text(path), path.suffix)


def _loc(parts: Iterable[int | str]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _message(err: ErrorDetails) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "missing required key"
    shown = repr(err.get("input"))
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{err['msg']} (got {shown})"


def pydantic_problems(where: str, episode: str | None, exc: ValidationError) -> list[Problem]:
    return [Problem(where, _message(err), episode, _loc(err["loc"])) for err in exc.errors()]


def check_record(where: str, record: Any) -> tuple[Episode | None, list[Problem]]:
    """Parse and check one record; the episode is None when it does not parse."""
    if not isinstance(record, dict):
        return None, [Problem(where, f"an episode must be a JSON object, not {type(record).__name__}")]
    name = record.get("episode_id") if isinstance(record.get("episode_id"), str) else None
    try:
        episode = Episode.model_validate(record)
    except ValidationError as exc:
        return None, pydantic_problems(where, name, exc)
    found = [Problem(where, message, episode.episode_id, fld) for fld, message in episode_problems(episode)]
    return episode, found


def check_episodes(items: Iterable[tuple[str, Any]]) -> tuple[list[Episode], list[str], list[Problem]]:
    episodes: list[Episode] = []
    positions: list[str] = []
    problems: list[Problem] = []
    first_seen: dict[str, str] = {}
    for where, record in items:
        if isinstance(record, Problem):
            problems.append(record)
            continue
        episode, found = check_record(where, record)
        problems.extend(found)
        if episode is None:
            continue
        if episode.episode_id in first_seen:
            problems.append(
                Problem(
                    where,
                    f"duplicate episode id (first at {first_seen[episode.episode_id]})",
                    episode.episode_id,
                    "episode_id",
                )
            )
        first_seen.setdefault(episode.episode_id, where)
        episodes.append(episode)
        positions.append(where)
    return episodes, positions, problems


def load_suite(path: str | Path) -> Suite:
    """Read and validate a suite; raise :class:`SuiteInvalid` listing every problem."""
    path = Path(path)
    episodes, positions, problems = check_episodes(read_records(path))
    if not problems and not episodes:
        problems.append(Problem(str(path), "holds no episodes"))
    if problems:
        raise SuiteInvalid(str(path), problems)
    return Suite(path, episodes, file_sha256(path), positions)


def dump_episode(episode: Episode) -> str:
    return json.dumps(episode.model_dump(mode="json", exclude_none=True), ensure_ascii=False)


def write_suite(episodes: Iterable[Episode], out: Path | TextIO) -> int:
    """Write episodes as JSON Lines (to a path, made atomically, or an open text stream)."""
    if not isinstance(out, Path):
        count = 0
        for episode in episodes:
            out.write(dump_episode(episode) + "\n")
            count += 1
        return count
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    count = 0
    with partial.open("w", encoding="utf-8") as fh:
        for episode in episodes:
            fh.write(dump_episode(episode) + "\n")
            count += 1
    partial.replace(out)
    return count
