"""Loading a ``FILE.py:CLASS`` target: the file imported as a private module, its Script class and the kernel's
parameters; a ``FILE.py:FUNCTION`` target (``warpspec check --reference``)."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

from warpspec.cli.failures import KernelFailure, UsageError
from warpspec.errors import CompileError


def load_script_class(target: str) -> type:
    """Import FILE.py (its folder on ``sys.path``, so it can import its neighbours) and return its Script CLASS."""
    from warpspec.script import Script

    path_text, module, class_name = _import_target(target, "CLASS")
    script_cls = getattr(module, class_name, None)
    if script_cls is None:
        names = sorted(n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, Script)
                       and v is not Script)
        raise UsageError(f"{path_text} has no class {class_name!r}; its Script classes: {', '.join(names) or 'none'}")
    if not (isinstance(script_cls, type) and issubclass(script_cls, Script)):
        raise UsageError(f"{class_name} in {path_text} is not a warpspec.Script subclass")
    return script_cls


def load_function(target: str, option: str):
    """Import FILE.py as ``load_script_class`` does and return its FUNCTION (a ``--reference`` target: ``option``
    names it in errors)."""
    path_text, module, name = _import_target(target, "FUNCTION", option)
    function = getattr(module, name, None)
    if function is None or isinstance(function, type) or not callable(function):
        names = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module.__name__)
        what = "no function" if function is None else "a non-function"
        raise UsageError(f"{option}: {path_text} has {what} {name!r}; its functions: {', '.join(names) or 'none'}")
    return function


def _import_target(target: str, what: str, option: str | None = None):
    """``(FILE as given, the imported module, NAME)`` of a ``FILE.py:NAME`` target (``what``: NAME's kind, for
    errors; ``option``: the option that gave it, if any)."""
    prefix = f"{option}: " if option else ""
    path_text, separator, name = target.rpartition(":")
    if not separator or not path_text or not name:
        raise UsageError(f"{prefix}expected FILE.py:{what}, got {target!r}")
    path = Path(path_text).resolve()
    if not path.is_file():
        raise UsageError(f"{prefix}no such file: {path_text}")
    if path.suffix != ".py":
        raise UsageError(f"{prefix}{path_text} is not a Python file: expected FILE.py:{what}")
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    # A private module name: importing FILE must not replace a module of the same name the caller already loaded.
    module_name = f"_warpspec_check_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        raise UsageError(f"{prefix}importing {path_text} failed: {type(error).__name__}: {error}") from None
    return path_text, module, name


def kernel_parameters(script_cls) -> list:
    """The kernel's parameters (``warpspec.frontend.kernel.parameters``). A signature the language refuses (a
    parameter type it has no runtime form of) is the kernel's error whatever the schedule: KernelFailure."""
    from warpspec.frontend.kernel import parameters

    try:
        return parameters(script_cls)
    except CompileError as error:
        raise KernelFailure(script_cls.__name__, f"CompileError: {error}") from None
