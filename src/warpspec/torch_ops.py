"""warpspec kernels as PyTorch operators (``torch.library`` custom ops), for eager code, ``torch.compile`` and CUDA
graphs alike. Needs PyTorch (``pip install -e '.[torch]'``); the rest of warpspec never imports it.

Write the operator as an ordinary Python function with type hints that allocates its outputs with torch and calls
Scripts on them, and decorate it with ``custom_op``::

    import torch
    import warpspec.torch_ops
    from matmul_v3 import MatmulWGMMAV3

    kernel = MatmulWGMMAV3()  # autotuned (or pin a schedule)

    @warpspec.torch_ops.custom_op("mylib::matmul_v3")
    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        c = a.new_empty((a.shape[0], b.shape[0]))
        kernel(a.shape[0], b.shape[0], a.shape[1], a, b, c)
        return c

The same function is both implementations PyTorch asks for:

* the real one, for eager calls and compiled graphs: a Script called on CUDA tensors launches on the tensors'
  GPU (whatever the current device) and on PyTorch's current stream there, so ``torch.cuda.stream`` and
  ``torch.cuda.graph`` apply; on CPU tensors it runs on the emulator;
* the fake (meta) one, which gives ``torch.compile`` the outputs' shapes, dtypes and devices: torch runs the
  function on fake tensors, the allocations produce fake outputs and a Script called on fake or meta tensors
  computes nothing.

An operator that writes into arguments instead of returning new tensors names them in ``mutates_args`` and returns
None. The op is opaque to ``torch.compile``: ``fullgraph=True`` compiles a function calling it without a graph
break. Autotuned Scripts tune on their first call outside a CUDA graph capture; call the op once eagerly with the
shapes a graph will use before capturing it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import torch

from warpspec import runtime
from warpspec.cuda.driver import default_device
from warpspec.errors import ArgumentError, WarpspecError


#: The ``torch.library.Library`` fragment of each namespace warpspec defined ops in; held so the ops stay
#: registered for the life of the process.
_LIBRARIES: dict[str, torch.library.Library] = {}


def custom_op(name: str, function: Callable | None = None, *, mutates_args: Iterable[str] | str = (),
              schema: str | None = None, fake: Callable | None = None):
    """Register ``function`` (type-hinted, allocating its outputs and calling Scripts) as the PyTorch operator
    ``name`` (``"namespace::op_name"``) with ``function`` itself as its fake implementation; return the operator
    (``torch.ops.namespace.op_name``, callable like the function). Use as ``@custom_op("mylib::op")`` or
    ``custom_op("mylib::op", function)``. ``mutates_args`` names the arguments the function writes into;
    ``schema`` (e.g. ``"(Tensor a, Tensor b) -> Tensor"``) replaces the one inferred from the type hints;
    ``fake`` replaces ``function`` as the fake implementation (one that must not launch, for instance, so the real
    one need not ask whether its tensors are fake).

    The operator is defined with ``torch.library.Library`` and one implementation for every device
    (``CompositeExplicitAutograd``), so a call goes straight through PyTorch's dispatcher: a few microseconds,
    where ``torch.library.custom_op``'s Python wrapper costs tens."""

    def register(function: Callable):
        namespace, separator, op_name = name.partition("::")
        if not separator or not namespace or not op_name or "::" in op_name:
            raise ArgumentError(f"custom_op name must be 'namespace::op_name', got {name!r}")
        library = _LIBRARIES.get(namespace)
        if library is None:
            library = _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")
        text = schema if schema is not None else torch.library.infer_schema(function, mutates_args=mutates_args)
        library.define(op_name + text)
        library.impl(op_name, _on_the_tensors_device(function), "CompositeExplicitAutograd")
        torch.library.register_fake(name, _errors_through_tracing(function if fake is None else fake), lib=library)
        return getattr(getattr(torch.ops, namespace), op_name)

    return register if function is None else register(function)


def _errors_through_tracing(fake: Callable) -> Callable:
    """The fake implementation ``fake`` raising its warpspec errors (an argument mistake the operator's checks find
    on the fake tensors) so that ``torch.compile(fullgraph=True)`` hands them to the caller as they are, not as a
    ``TorchRuntimeError`` of many lines that quotes them: ``_through_tracing``."""

    @functools.wraps(fake)
    def checked(*args, **kwargs):
        try:
            return fake(*args, **kwargs)
        except WarpspecError as error:
            raise _through_tracing(error) from None

    return checked


#: A warpspec error class -> its twin that TorchDynamo passes on (``_through_tracing``).
_TRACED_CLASSES: dict[type, type] = {}


def _through_tracing(error: WarpspecError) -> WarpspecError:
    """``error`` as an instance of a subclass of both its own class and TorchDynamo's ``Unsupported``: Dynamo wraps
    every other exception raised while it traces into one of its own, but re-raises an ``Unsupported`` unchanged
    (a graph break: without ``fullgraph`` the call then runs eagerly and its real implementation raises the plain
    error). So ``except ArgumentError`` catches it, and Dynamo appends the user's line ("from user code")."""
    from torch._dynamo.exc import Unsupported

    cls = type(error)
    twin = _TRACED_CLASSES.get(cls)
    if twin is None:
        twin = _TRACED_CLASSES[cls] = type(cls.__name__, (cls, Unsupported), {
            "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__doc__": f"{cls.__name__} raised while torch.compile traces a warpspec operator."})
    traced = twin.__new__(twin)
    Unsupported.__init__(traced, str(error), gb_type=f"warpspec {cls.__name__}")
    return traced


def _on_the_tensors_device(function: Callable) -> Callable:
    """``function`` running its Scripts where its tensor arguments are: on the emulator for CPU tensors, on their
    GPU for CUDA tensors (made the current device for the call when it is not)."""

    @functools.wraps(function)
    def implementation(*args, **kwargs):
        device = _device_of(args, kwargs)
        if device is None:
            return function(*args, **kwargs)
        if device.type == "cpu":
            if runtime.get_backend() == "emulator":
                return function(*args, **kwargs)
            with runtime.use_backend("emulator"):
                return function(*args, **kwargs)
        if device.type == "cuda":
            index = device.index if device.index is not None else default_device()
            if runtime.get_backend() != "cuda":
                with runtime.use_backend("cuda"):
                    return _on_gpu(function, index, args, kwargs)
            return _on_gpu(function, index, args, kwargs)
        return function(*args, **kwargs)  # another device type: the Scripts' own checks say what they take

    return implementation


def _on_gpu(function: Callable, index: int, args: tuple, kwargs: dict):
    if index == default_device():
        return function(*args, **kwargs)
    with torch.cuda.device(index):
        return function(*args, **kwargs)


def _device_of(args: tuple, kwargs: dict):
    """The device of the first tensor among the arguments (or in a list argument), or None."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value.device
        if isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, torch.Tensor):
                    return item.device
    return None


def dispatch_is_plain(a: torch.Tensor, *others) -> bool:
    """Whether PyTorch's dispatcher would hand these tensors (``others`` may hold None) to a warpspec op's
    implementation and do nothing else: CUDA tensors of the plain class on the current device (the CUDA back end
    selected), none needing a gradient, and ``dispatcher_idle``. Then an eager call may run the implementation
    itself, skipping the dispatcher's cost, which is more than a small kernel's time; otherwise it goes through the
    op, which the dispatcher routes."""
    if not a.is_cuda or not dispatcher_idle(a.get_device()):
        return False
    grad = torch.is_grad_enabled()
    return all(t is None or (type(t) is torch.Tensor and not (grad and t.requires_grad)) for t in (a, *others))


def dispatcher_idle(device: int) -> bool:
    """What ``dispatch_is_plain`` asks of the moment rather than of the tensors: no torch function or dispatch mode,
    no functorch transform (vmap, functionalize) and no profiler running, GPU ``device`` the current one (PyTorch has
    initialised CUDA: a CUDA tensor exists) and the CUDA back end selected. A caller whose cached call fixed the tensors' class and device checks this alone."""
    C = torch._C
    if (C._is_torch_function_mode_enabled() or C._len_torch_dispatch_stack() or C._are_functorch_transforms_active()
            or torch.autograd.profiler._is_profiler_enabled):
        return False
    return device == C._cuda_getDevice() and runtime.cuda_backend_on(device)
