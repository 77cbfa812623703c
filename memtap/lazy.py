"""Names of a package loaded on first use (PEP 562), so importing the package imports none of
them: ``memtap``, ``memtap.findings`` and ``memtap.ui`` each define ``__getattr__`` with this."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["load_export"]


def load_export(package: str, exports: Mapping[str, str], namespace: dict[str, Any], name: str) -> Any:
    """``name`` from the module ``exports`` maps it to, kept in the package's ``namespace`` (the
    next lookup is a plain attribute); AttributeError for a name the package does not export."""
    module = exports.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value
