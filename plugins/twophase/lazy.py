"""Names a package exports from its modules, imported on first use (PEP 562).

A participant kind's package lists its public names per module; importing the package
(twophase.spec does, for the target classes) then loads none of the kind's client
libraries until a name that needs them is used.
"""

from __future__ import annotations

from importlib import import_module


def lazy_exports(package: str, exports: dict[str, tuple[str, ...]]):
    """(__getattr__, __all__) for `package`: `exports` maps a module of the package to the
    names it provides."""
    module_of = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str):
        if name not in module_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{module_of[name]}"), name)

    return __getattr__, sorted(module_of)
