"""Names of a package imported when first used (PEP 562's module ``__getattr__``), so that
importing the package stays quick: ``import sweeper`` does not import pandas, and the site,
which reads a study's manifest, does not import the recorder through ``sweeper.study``."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_names(
    package: str, names: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose ``names`` map each name to the
    module that defines it (a module itself where the name is the module's last part). A name
    once imported is kept in ``namespace``, the package's globals."""

    def getattr_(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = import_module(module)
        value = loaded if module.endswith(f".{name}") else getattr(loaded, name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted([*namespace, *names])

    return getattr_, dir_
