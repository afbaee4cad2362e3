"""Back-end selection and the path from ``kernel(*args)`` to a run.

``WARPSPEC_BACKEND`` (``emulator``, ``cuda`` or ``auto``, the default) chooses where kernels run; ``set_backend`` and
``use_backend`` choose from Python and take precedence. ``auto`` means the CUDA back end when a Hopper GPU is
present, the emulator otherwise.

On the CUDA back end a Script keeps, per instance, the launch plan entries its calls made
(``warpspec.cuda.plan``): a call with positional arguments of a signature seen before runs one generated function
that checks and launches, and reaches the general path (binding, compile-time values, the kernel's IR, building a
plan) only when no entry takes its arguments.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

from warpspec.cuda.plan import MISS
from warpspec.dtypes import PointerType
from warpspec.environment import environment
from warpspec.errors import ArgumentError

BACKENDS = ("emulator", "cuda", "auto")
MAX_CALL_ENTRIES = 8  # plan entries kept per Script instance; the oldest goes first
_selected: str | None = None
_hopper: dict[int, bool] = {}  # device -> has_hopper_gpu() there; the hardware does not change while we run

def _check(name: str, source: str) -> str:
    if name not in BACKENDS:
        raise ArgumentError(f"{source} must be one of {', '.join(BACKENDS)}, got {name!r}")
    return name


def mode() -> str:
    """``emulator``, ``cuda`` or ``auto``: what ``set_backend``/``use_backend`` or WARPSPEC_BACKEND select."""
    if _selected is not None:
        return _selected
    text = environment("WARPSPEC_BACKEND", "auto")
    if text in BACKENDS:
        return text
    return _check(text.strip().lower(), "WARPSPEC_BACKEND")


def get_backend() -> str:
    """The back end kernels run on now: ``"emulator"`` or ``"cuda"`` (``auto`` resolved)."""
    name = mode()
    if name == "auto":
        from warpspec.cuda.driver import default_device, has_hopper_gpu

        device = default_device()
        found = _hopper.get(device)
        if found is None:
            found = _hopper[device] = has_hopper_gpu()
        return "cuda" if found else "emulator"
    return name


def cuda_backend_on(device: int) -> bool:
    """``get_backend() == "cuda"`` when ``device`` is the current GPU (the caller knows it is), at the cost of a
    dictionary lookup once ``auto`` has resolved for that device."""
    name = mode()
    if name == "auto":
        found = _hopper.get(device)
        return found if found is not None else get_backend() == "cuda"
    return name == "cuda"


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


#: Debug mode (``warpspec.cuda.debug``): GPU launches use the debug build, whose barrier waits end the kernel with a
#: message instead of hanging. Off unless WARPSPEC_DEBUG=1 was set when warpspec was imported, or set_debug(True).
_debugging = environment("WARPSPEC_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


def set_debug(enabled: bool) -> None:
    """Turn debug mode on or off for the kernels launched from now on (see ``warpspec.cuda.debug``)."""
    global _debugging
    _debugging = bool(enabled)


@contextmanager
def debug(enabled: bool = True):
    """``with warpspec.debug():`` launches the kernels called inside in debug mode."""
    global _debugging
    saved = _debugging
    set_debug(enabled)
    try:
        yield
    finally:
        _debugging = saved


#: Where launches go while profiling (``warpspec.profile``): an object whose ``launch(kernel, arguments, backend)``
#: runs the kernel and keeps its timeline (``warpspec.timeline.gpu.ProfileSession``); None: launches run plainly.
_profiler = None


def set_profiler(profiler):
    """Send the launches made from now on to ``profiler.launch(kernel, arguments, backend)`` (None: run them
    plainly); returns the profiler that was set before."""
    global _profiler
    previous, _profiler = _profiler, profiler
    return previous


def kernel_for(script, compile_time: dict):
    """The IR of ``script`` for these compile-time values, built once per instance and specialisation."""
    from warpspec.frontend.kernel import build_kernel

    cache = script.__dict__.setdefault("_warpspec_kernels", {})
    key = tuple(sorted(compile_time.items()))
    if key not in cache:
        cache[key] = build_kernel(script, compile_time)
    return cache[key]


def _selection() -> str:
    """What chose the back end, for a message: ``set_backend('cuda')`` or the environment variable."""
    return f"set_backend({_selected!r})" if _selected is not None else f"WARPSPEC_BACKEND={mode()}"


def shape_only(values) -> bool:
    """Whether any of ``values`` is a torch fake or meta tensor: torch.compile and torch.library trace with
    those (their shapes, no data), and a kernel called on them has nothing to compute."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    from torch._subclasses.fake_tensor import is_fake

    return any(isinstance(value, torch.Tensor) and (value.is_meta or is_fake(value)) for value in values)


def run_script(script, args: tuple, kwargs: dict):
    """Bind the arguments, build (or reuse) the kernel and run it on the selected back end."""
    entries = script.__dict__.get("_warpspec_calls")
    if entries and not kwargs and not _debugging and _profiler is None and mode() != "emulator":
        # A plan entry exists only for a device where a CUDA launch worked out, so under ``auto`` it is a Hopper
        # GPU; each entry checks its arrays' device (the current device, for a kernel without arrays).
        for call in entries:
            if call(args) is not MISS:
                return None
    if shape_only((*args, *kwargs.values())):
        return None  # before binding: under torch.compile the sizes may be symbolic too
    from warpspec.frontend.kernel import bind_arguments

    runtime, compile_time = bind_arguments(type(script), args, kwargs)
    kernel = kernel_for(script, compile_time)
    if _profiler is not None:
        return _profiler.launch(kernel, runtime, get_backend())
    if get_backend() == "emulator":
        from warpspec.emulator.run import call_on_emulator

        return call_on_emulator(kernel, runtime)
    from warpspec.cuda.driver import CudaError

    try:
        if _debugging:
            from warpspec.cuda.debug import run_debug

            return run_debug(kernel, runtime)
        from warpspec.cuda.launch import launch_planned

        plan = launch_planned(kernel, runtime)
    except CudaError as error:
        if error.code is not None:  # the driver is there and refused a call: its message says which
            raise
        raise CudaError(f"{error}; kernels run on the CUDA back end because {_selection()} selects it: "
                        f"WARPSPEC_BACKEND=emulator (or auto, the default, without a GPU) runs them on the CPU "
                        f"emulator", None) from None
    if not kwargs:
        _remember_entry(script, plan, args, compile_time)
    return None


def direct_launches() -> bool:
    """Whether a Script call on the GPU would take its launch plan now: not in debug mode, no profiler recording.
    What a caller of ``pointer_launcher``'s launches checks before each one."""
    return not _debugging and _profiler is None


def pointer_launcher(script, args: tuple):
    """For a library op (``warpspec.ops``) whose call ``script(*args)`` launched on the GPU: a function
    ``launch(*addresses, stream=None)`` that launches it again for arguments like ``args`` but for the addresses
    of their arrays, given in the order of the Script's parameters (``warpspec.cuda.plan.LaunchPlan.bind``: the
    caller must keep every other property of the arguments, and check ``direct_launches()`` before each launch).
    None where calls must take the Script's own path: not on the CUDA back end, in debug mode, under a profiler,
    or before a launch made a plan for such arguments."""
    if not direct_launches() or get_backend() != "cuda":
        return None
    from warpspec.cuda.launch import bound_launch
    from warpspec.frontend.kernel import bind_arguments

    runtime, compile_time = bind_arguments(type(script), args, {})
    kernel = kernel_for(script, compile_time)
    arrays = {p.name for p in kernel.params if isinstance(p.type, PointerType)}
    return bound_launch(kernel, runtime, tuple(name for name in runtime if name in arrays))  # in the call's order


def _remember_entry(script, plan, args: tuple, compile_time: dict) -> None:
    """Keep ``plan``'s entry for calls like ``script(*args)`` on the instance."""
    from warpspec.frontend.kernel import parameters

    params = parameters(type(script))
    names = tuple(p.name for p in params)
    defaults = {p.name: p.default for p in params[len(args):]}
    # The entry compares compile-time arguments as passed (value and Python type), so a call passing 2 where 2.0
    # was passed before takes the general path, which converts and checks it.
    passed = {name: args[j] for j, name in enumerate(names[:len(args)]) if name in compile_time}
    entries = script.__dict__.setdefault("_warpspec_calls", [])
    entries.insert(0, plan.entry(names, len(args), passed, defaults))
    del entries[MAX_CALL_ENTRIES:]


# ------------------------------------------------------------------------------- the device, for library ops
# What the library ops (``warpspec.ops``) ask of the CUDA driver, so that they reach it only through this module.


def current_device() -> int:
    """The GPU launches go to: PyTorch's current device when PyTorch has initialised CUDA, else 0."""
    from warpspec.cuda.driver import default_device

    return default_device()


_multiprocessors: dict[int, int] = {}


def multiprocessor_count(device: int | None = None) -> int:
    """The number of SMs of ``device`` (default: ``current_device()``), asked of the driver once per device."""
    device = current_device() if device is None else device
    if device not in _multiprocessors:
        from cuda.bindings import driver as cu

        from warpspec.cuda.driver import check, context

        context(device)
        attribute = cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
        handle = check(cu.cuCtxGetDevice(), "cuCtxGetDevice")
        _multiprocessors[device] = check(cu.cuDeviceGetAttribute(attribute, handle), "cuDeviceGetAttribute")
    return _multiprocessors[device]


def synchronize() -> None:
    """Wait until the work queued on ``current_device()`` has finished."""
    from warpspec.cuda.driver import synchronize as wait

    wait(current_device())


def device_buffer(nbytes: int):
    """``nbytes`` of device memory on ``current_device()`` for kernels run without PyTorch
    (``warpspec.cuda.driver.DeviceBuffer``: ``array``, ``upload``, ``download``; freed with the object)."""
    from warpspec.cuda.driver import DeviceBuffer

    return DeviceBuffer(nbytes)
