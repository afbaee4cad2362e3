"""Running code right after a module is imported, wherever and whenever that import happens (``after_import``).

``warpspec.ops`` needs no PyTorch, yet torch.compile must find its custom ops registered before it traces the first
call (it cannot trace a registration). When torch is imported after ``warpspec.ops``, the ops register as soon as
torch's import completes: a finder at the front of ``sys.meta_path`` wraps the loader of torch's module spec once,
runs the callback after the module executed, and puts the original loader back.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable


class _ThenCall(importlib.abc.Loader):
    """``loader`` that runs ``callback`` after it executed the module, then restores ``loader`` on the module."""

    def __init__(self, loader, callback: Callable[[], None]):
        self._loader = loader
        self._callback = callback

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        module.__loader__ = module.__spec__.loader = self._loader
        # A callback that fails must not fail the import: what it does is retried where it is needed.
        try:
            self._callback()
        except Exception:  # noqa: BLE001
            pass


class _Watch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for module ``name``, the spec the other finders give, with its loader wrapped."""

    def __init__(self, name: str, callback: Callable[[], None]):
        self._name = name
        self._callback = callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self._name:
            return None
        sys.meta_path.remove(self)  # once, and so that the lookup below does not come back here
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenCall(spec.loader, self._callback)
        return spec


def after_import(name: str, callback: Callable[[], None]) -> None:
    """Call ``callback()`` once top-level module ``name`` has been imported: now if it has been, else right after its
    import completes (an exception from the callback then leaves the import unharmed)."""
    if name in sys.modules:
        callback()
    else:
        sys.meta_path.insert(0, _Watch(name, callback))
