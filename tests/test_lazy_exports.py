"""The packages that load their names on first use (``memtap``, ``memtap.findings``, ``memtap.ui``)
resolve every name they export, and refuse one they do not with the usual AttributeError."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("package", ["memtap", "memtap.findings", "memtap.ui"])
def test_every_exported_name_loads_and_an_unknown_one_is_an_attribute_error(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
        assert name in vars(module), f"{package}.{name} is kept after its first lookup"
    assert dir(module) == sorted(module.__all__)
    with pytest.raises(AttributeError, match=rf"module '{package}' has no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018
    assert not hasattr(module, "no_such_name")
