from __future__ import annotations

import memtap


def test_all_lists_every_public_name_of_the_package() -> None:
    public = {name for name in dir(memtap) if not name.startswith("_") and name not in {"annotations"}}
    modules = {name for name in public if type(getattr(memtap, name)).__name__ == "module"}
    assert set(memtap.__all__) - {"__version__"} == public - modules
