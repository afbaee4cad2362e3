"""Back-end selection and the path from ``kernel(*args)`` to a run.

``WARPSPEC_BACKEND`` (``emulator``, ``cuda`` or ``auto``, the default) chooses where kernels run; ``set_backend`` and
``use_backend`` choose from Python and take precedence. ``auto`` means the CUDA back end when a Hopper GPU is
present, the emulator otherwise.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

from warpspec.errors import ArgumentError

BACKENDS = ("emulator", "cuda", "auto")
_selected: str | None = None


def _check(name: str, source: str) -> str:
    if name not in BACKENDS:
        raise ArgumentError(f"{source} must be one of {', '.join(BACKENDS)}, got {name!r}")
    return name


def get_backend() -> str:
    """The back end kernels run on now: ``"emulator"`` or ``"cuda"`` (``auto`` resolved)."""
    name = _selected or _check(os.environ.get("WARPSPEC_BACKEND", "auto").strip().lower(), "WARPSPEC_BACKEND")
    if name == "auto":
        from warpspec.cuda.driver import has_hopper_gpu

        return "cuda" if has_hopper_gpu() else "emulator"
    return name


def set_backend(name: str | None) -> None:
    """Run kernels on ``name`` (``emulator``, ``cuda``, ``auto``) from now on; None returns to WARPSPEC_BACKEND."""
    global _selected
    _selected = None if name is None else _check(name, "backend")


@contextmanager
def use_backend(name: str):
    """``with use_backend("emulator"):`` runs the kernels called inside on that back end."""
    global _selected
    saved = _selected
    set_backend(name)
    try:
        yield
    finally:
        _selected = saved


def kernel_for(script, compile_time: dict):
    """The IR of ``script`` for these compile-time values, built once per instance and specialisation."""
    from warpspec.frontend.kernel import build_kernel

    cache = script.__dict__.setdefault("_warpspec_kernels", {})
    key = tuple(sorted(compile_time.items()))
    if key not in cache:
        cache[key] = build_kernel(script, compile_time)
    return cache[key]


def run_script(script, args: tuple, kwargs: dict):
    """Bind the arguments, build (or reuse) the kernel and run it on the selected back end."""
    from warpspec.frontend.kernel import bind_arguments

    runtime, compile_time = bind_arguments(type(script), args, kwargs)
    kernel = kernel_for(script, compile_time)
    if get_backend() == "emulator":
        from warpspec.emulator.run import run_kernel

        return run_kernel(kernel, runtime)
    from warpspec.cuda.launch import run_kernel

    return run_kernel(kernel, runtime)
