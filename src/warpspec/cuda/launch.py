"""Running a kernel on the GPU: generate and compile it once, then launch it through a launch plan
(``warpspec.cuda.plan``) made once per argument signature."""

from __future__ import annotations

from dataclasses import dataclass, field

from warpspec.cuda.codegen import GeneratedKernel, generate
from warpspec.cuda.compiler import CompiledModule, compile_cuda
from warpspec.cuda.plan import MISS, LaunchPlan
from warpspec.environment import environment
from warpspec.ir import nodes as ir

#: Plans kept per built kernel (one per argument signature and device); the oldest goes first.
MAX_PLANS = 8


@dataclass
class BuiltKernel:
    """A kernel's generated source and cubin, and the launch plans made for it so far."""

    generated: GeneratedKernel
    module: CompiledModule
    plans: list = field(default_factory=list)


_built: dict[tuple, tuple[ir.Kernel, BuiltKernel]] = {}


def compile_kernel(kernel: ir.Kernel, options: tuple[str, ...] = (), compiler: str | None = None, min_blocks: int = 1,
                   block_group: int = 0, quad_stores: bool = True, debug: bool = False) -> BuiltKernel:
    """Generate CUDA C++ for ``kernel`` and compile it for sm_90a (cached in memory and on disk) with
    ``compiler``: ``nvrtc`` (default) or ``nvcc``, by default from WARPSPEC_COMPILER; ``debug``: the debug build
    (bounded barrier waits, ``warpspec.debug``)."""
    compiler = compiler or environment("WARPSPEC_COMPILER", "nvrtc")
    key = (id(kernel), tuple(options), compiler, min_blocks, block_group, quad_stores, debug)
    entry = _built.get(key)
    if entry is not None and entry[0] is kernel:
        return entry[1]
    generated = generate(kernel, min_blocks, block_group, quad_stores, debug)
    module = compile_cuda(generated.source, options=options, compiler=compiler)
    built = BuiltKernel(generated, module)
    _built[key] = (kernel, built)  # the kernel is kept alive with its entry, so its id stays unique
    return built


def launch_kernel(kernel: ir.Kernel, arguments: dict, stream: int | None = None, built: BuiltKernel | None = None,
                  l2_promotion: int = 128) -> None:
    """Launch ``kernel`` on its arrays' GPU (the current GPU for a kernel without arrays) with runtime
    ``arguments`` (by parameter name) on ``stream`` (a CUstream handle; default: PyTorch's current stream on that
    GPU when PyTorch uses CUDA, else stream 0); ``built``
    overrides the default build (e.g. other compile options)."""
    launch_planned(kernel, arguments, stream, built, l2_promotion)


def bound_launch(kernel: ir.Kernel, arguments: dict, pointers: tuple[str, ...], l2_promotion: int = 128):
    """The launch of ``kernel`` that one of its plans binds for ``arguments`` (``LaunchPlan.bind``: a function of
    the addresses of the arrays named in ``pointers``), or None when no plan takes such arguments (none launched
    them yet)."""
    for plan in compile_kernel(kernel).plans:
        if plan.l2_promotion == l2_promotion:
            launch = plan.bind(arguments, pointers)
            if launch is not MISS:
                return launch
    return None


def launch_planned(kernel: ir.Kernel, arguments: dict, stream: int | None = None, built: BuiltKernel | None = None,
                   l2_promotion: int = 128) -> LaunchPlan:
    """``launch_kernel``, returning the launch plan that launched: the first of ``built``'s plans that takes the
    arguments, or a new one made for them (making one checks the arguments' signature, so an argument of the
    wrong kind, dtype or device raises its ArgumentError and leaves no plan behind)."""
    built = built or compile_kernel(kernel)
    stream = None if stream is None else int(stream)
    for plan in built.plans:
        if plan.l2_promotion == l2_promotion and plan.run(arguments, stream) is not MISS:
            return plan
    plan = LaunchPlan(kernel, built, arguments, l2_promotion)
    built.plans.append(plan)
    del built.plans[:-MAX_PLANS]
    if plan.run(arguments, stream) is MISS:
        raise AssertionError("a launch plan refused the arguments it was made for")
    return plan
