"""Purged text out of what remains: receipts in its place, wherever and however it is spelled."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

__all__ = ["MIN_SUBSTRING", "RECEIPT_PREFIXES", "Scrubber", "metadata_texts", "scrub_spill", "stamp"]

# Texts shorter than this are replaced only where they are a whole value, never inside other
# text: replacing every "ok" in a trace would destroy it, and could not identify anyone.
MIN_SUBSTRING = 8
# What is already a receipt (a purge's, or a content policy's) is not content.
RECEIPT_PREFIXES = ("purged;sha256:", "sha256:", "dropped;bytes=")


def stamp(text: str) -> str:
    """What a purged text becomes: ``purged;sha256:<hex>;bytes=<n>``."""
    data = text.encode("utf-8", "surrogatepass")
    return f"purged;sha256:{hashlib.sha256(data).hexdigest()};bytes={len(data)}"


def _forms(text: str) -> list[str]:
    """The ways a text is spelled in the file: as it is, and escaped inside JSON."""
    forms = [text, json.dumps(text, ensure_ascii=False)[1:-1], json.dumps(text, ensure_ascii=True)[1:-1]]
    return list(dict.fromkeys(forms))


def metadata_texts(metadata: str | None) -> list[str]:
    """The string values of a memory's metadata (and the whole JSON text)."""
    if not metadata or metadata == "{}":
        return []
    out = [metadata]
    try:
        value = json.loads(metadata)
    except ValueError:
        return out
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return out


class Scrubber:
    """Replaces every purged text in a text (as it is, or JSON-escaped) by its receipt; short
    texts only where they are a whole JSON string. Each spelling and its receipt are worked out
    once, however many rows are scrubbed."""

    def __init__(self, texts: list[str]) -> None:
        self.replacements: list[tuple[str, str]] = []
        for purged in texts:
            receipt = stamp(purged)
            for form in _forms(purged):
                if len(purged) >= MIN_SUBSTRING:
                    self.replacements.append((form, receipt))
                else:
                    self.replacements.append((f'"{form}"', f'"{receipt}"'))

    def __bool__(self) -> bool:
        return bool(self.replacements)

    def __call__(self, text: str) -> str:
        for needle, receipt in self.replacements:
            if needle in text:
                text = text.replace(needle, receipt)
        return text


def scrub_spill(db: Path, texts: list[str]) -> None:
    """The spill file beside the database (events that could not be written) holds them too."""
    spill = db.with_name(db.name + ".unwritten.jsonl")
    if texts and spill.exists():
        original = spill.read_text(encoding="utf-8", errors="surrogateescape")
        scrubbed = Scrubber(texts)(original)
        if scrubbed != original:
            spill.write_text(scrubbed, encoding="utf-8", errors="surrogateescape")
