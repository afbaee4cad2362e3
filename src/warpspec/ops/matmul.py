"""``warpspec.ops.matmul``: a @ b with a fused epilogue, for numpy arrays (emulator) and torch tensors (GPU or
emulator), on the library GEMM of ``warpspec.ops.kernels``.

A call validates its arguments (an ``ArgumentError`` names the argument and what was expected), resolves the
output and the kernel variant, and launches:

* numpy arrays run on the emulator, directly;
* torch tensors go through one custom op, ``warpspec::matmul`` (``warpspec.torch_ops.custom_op``), which writes
  into the output tensor: CUDA tensors run on their GPU and stream, CPU tensors on the emulator, and
  ``torch.compile(fullgraph=True)`` sees one opaque op.

Schedules (stages and tiles) are chosen per shape: on the GPU a winner that ``tune_matmul`` (or ``warpspec tune``)
stored for the shape's size buckets wins; otherwise the shipped defaults (``defaults.json`` beside this file,
by dtype and size buckets); otherwise a rule by problem size (``heuristic_schedule``). A call never tunes by itself,
so a first call costs a compile at most, and works inside CUDA graph capture once its kernel is built.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import math
import pathlib
import stat
import sys
import time
from collections.abc import Callable

import numpy as np

from warpspec import dtypes, runtime
from warpspec.dtypes import DType, bfloat16, float8_e4m3, float16, float32
from warpspec.errors import ArgumentError, CompileError, DefaultsFileError
from warpspec.files import exclusive, replace_file
from warpspec.ops.frame import Signatures, address, describe, has_memory, plain_cuda, sm_count
from warpspec.ops.kernels import ACTIVATIONS, GELU_SCALE, NUM_SMS, block_k_for, gemm_class
from warpspec.ops.operands import dtype_of, kind_of, same_device, same_kind
from warpspec.ops.workspace import placeholders_like, stream_workspace, workspace_like, workspace_sizes
from warpspec.tune.cache import size_bucket

#: Input dtype -> the output dtypes allowed (the first is the default).
OUT_DTYPES = {float16: (float16, float32), bfloat16: (bfloat16, float32), float8_e4m3: (bfloat16, float16, float32)}
#: The largest M, N or K: the kernel's sizes and loop counts are int32.
MAX_EXTENT = 2**31 - 1
#: TMA's rules: every row pitch and every base address a multiple of 16 bytes.
TMA_ALIGNMENT = 16
DEFAULTS_FILE = pathlib.Path(__file__).with_name("defaults.json")
#: Up to this M the split family runs every problem (a power of two, so that a size bucket of M belongs to one
#: family): decode and small-batch M, which its transposed tiles and split K serve whatever N is.
SPLIT_FAMILY_M = 64
#: Above ``SPLIT_FAMILY_M``, the split family runs the problems whose output, in the size buckets of M and N, is at
#: most this many ``SPLIT_FAMILY_TILE``-square tiles: one wave of the 132 SMs of an H100 or H200. Tuned on an H100
#: (2026-12-05, bf16, K 4096, each family's own tuning winner; docs/performance.md): where the output is at most
#: one wave of such tiles the split family's non-persistent tiles in 6 to 8 stages ran 0.85-0.96x cuBLAS against
#: the tile walk's 0.68-0.92x (M 512-2048 at N 1024, 512 x 4096, 256 x 6144); above it the tile walk won (0.92-0.99x
#: against 0.81-0.87x at 1024 x 4096, 1024 x 6144, 256 x 14336).
SPLIT_FAMILY_TILES = NUM_SMS
SPLIT_FAMILY_TILE = 128


@dataclasses.dataclass(frozen=True)
class Problem:
    """One validated call: sizes, dtypes, the operands' layouts and the epilogue."""

    m: int
    n: int
    k: int
    in_dtype: DType
    out_dtype: DType
    b_k_major: bool
    has_bias: bool
    activation: str | None
    a_k_major: bool = True  # False: a column-major A (the transposed view of a [K, M] tensor)

    @property
    def variant(self) -> tuple:
        """The kernel's constructor arguments besides the schedule: ``(b_k_major, has_bias, activation,
        a_k_major)``."""
        return (self.b_k_major, self.has_bias, self.activation, self.a_k_major)

    @property
    def split_family(self) -> bool:
        """Whether the split family's schedules run it (``warpspec.ops.kernels.SplitGemm``): M at most
        ``SPLIT_FAMILY_M``, a linear layer at a decode or small-batch M, whose few output tiles leave most SMs idle
        unless K is split or the product computed transposed; or an output of at most one wave of tiles
        (``SPLIT_FAMILY_TILES``), counted on the size buckets of M and N, so that a bucket belongs to one family."""
        if self.m <= SPLIT_FAMILY_M:
            return True
        rows, columns = (-(-size_bucket(x) // SPLIT_FAMILY_TILE) for x in (self.m, self.n))
        return rows * columns <= SPLIT_FAMILY_TILES


def matmul(a, b, *, bias=None, activation=None, out=None, out_dtype=None, scale_a=None, scale_b=None):
    """``a @ b`` for ``a`` [M, K] and ``b`` [K, N], like ``torch.matmul``, with an optional epilogue
    ``activation(scale_a · scale_b · (a @ b) + bias)`` fused into the kernel; fp32 accumulation.

    * ``a``, ``b``: float16, bfloat16 or float8_e4m3 (the same for both); each row-major or column-major (``b``
      as the transposed view of an [N, K] tensor: a linear layer's ``w.T``; ``a`` as ``x.T``), read as stored;
      float8 ``a`` must be row-major and ``b`` ``w.T``, as ``torch._scaled_mm`` requires. An operand whose row
      pitch is not a multiple of 16 bytes (TMA's), or whose strides are neither form (a strided, broadcast or
      reversed view), is multiplied from an aligned row-major copy; base addresses must be 16-byte aligned.
      ``a`` [..., M, K] with a 2-D ``b`` multiplies ``a``'s rows; ``a`` [B, M, K] with ``b`` [B, K, N] each batch
      (in one launch where there is no epilogue: docs/ops.md).
    * torch tensors that require a gradient (in grad mode) give a differentiable result
      (``warpspec.ops.matmul_grad``), or an ``ArgumentError`` where there is no backward (float8, ``out=``).
    * ``scale_a``, ``scale_b``: per-tensor scales, required for float8 inputs and refused otherwise: Python
      floats, or one-element float32 arrays/tensors (on ``a``'s device; read by the kernel, never by the host).
    * ``bias``: [N], of the output dtype. ``activation``: None, ``"relu"``, ``"gelu"`` (tanh approximation) or
      ``"silu"``.
    * ``out_dtype``: the input dtype by default (bfloat16 for float8 inputs); float32 allowed (and float16 for
      float8 inputs). ``out``: an [M, N] array/tensor of that dtype (unit column stride) to write into.

    numpy arrays (ml_dtypes for bfloat16 and float8) run on the emulator; torch tensors through the custom op
    ``warpspec::matmul``: CUDA tensors on the GPU, CPU tensors on the emulator. Returns ``out`` or a new array of
    the inputs' kind.
    """
    if type(a) is _BoundCalls.tensor and scale_a is None and scale_b is None:
        done = _bound_call(a, b, bias, activation, out, out_dtype)
        if done is not None:
            return done
    if len(getattr(a, "shape", ())) > 2 or len(getattr(b, "shape", ())) > 2:
        return _leading_dims(a, b, bias=bias, activation=activation, out=out, out_dtype=out_dtype, scale_a=scale_a,
                             scale_b=scale_b)
    if kind_of(a, "a") == "torch":  # the other operands' kinds are checked with the rest (``_validate``)
        return _torch_matmul(a, b, bias, activation, out, out_dtype, scale_a, scale_b)
    found = signature(a, b, bias, activation, out, out_dtype)
    problem = found.problem
    _check_scales(problem.in_dtype, scale_a, scale_b)
    if out is None:
        out = _padded_output(np.empty, problem, problem.out_dtype.numpy)
        found = found.with_output(a, b, bias, out)
    if found.layout is not None or any(found.staging) or found.without_products:
        scale = _numpy_scale(scale_a, scale_b) if problem.in_dtype == float8_e4m3 else None
        with runtime.use_backend("emulator"):
            launch(found, a, b, out, bias, scale)
    return out


def _leading_dims(a, b, out, **epilogue):
    """``matmul`` of operands with more than two dimensions, as ``torch.matmul`` takes them: ``a`` [..., M, K] by a
    2-D ``b`` [K, N] is one GEMM of ``a``'s rows (``reshape``: a view, no copy, when ``a``'s leading dimensions are
    contiguous); ``a`` [B, M, K] by ``b`` [B, K, N] without an epilogue is one launch of the grouped kernel over B
    groups of M rows where it reads the operands as they are (``warpspec.ops.grouped.batched_matmul``), else (a
    bias, an activation, float8, layouts it does not read) one GEMM per batch, a launch each, into ``out``
    [B, M, N] or a new stacked result."""
    kind = same_kind("a", a, b=b)
    if len(b.shape) == 2:
        k = a.shape[-1]
        rows = a.reshape(-1, k)
        flat_out = None
        if out is not None:
            if tuple(out.shape) != (*a.shape[:-1], b.shape[1]):
                raise ArgumentError(f"out must have shape {(*a.shape[:-1], b.shape[1])}, got {tuple(out.shape)}")
            try:  # a view, or nothing: a copy would leave out unwritten
                if kind == "numpy":
                    flat_out = out.view()
                    flat_out.shape = (-1, b.shape[1])
                else:
                    flat_out = out.view(-1, b.shape[1])
            except (AttributeError, RuntimeError):
                raise ArgumentError("out: its leading dimensions cannot be flattened without a copy; pass a "
                                    "contiguous out") from None
        result = matmul(rows, b, out=flat_out, **epilogue)
        return out if out is not None else result.reshape(*a.shape[:-1], result.shape[-1])
    if len(a.shape) == 2:
        raise ArgumentError(f"b must be 2-D, got shape {tuple(b.shape)}: a batched b [B, K, N] takes a batched a "
                            f"[B, M, K]")
    if len(a.shape) != 3 or len(b.shape) != 3 or a.shape[0] != b.shape[0]:
        raise ArgumentError(f"batched ops.matmul takes a [B, M, K] and b [B, K, N] with one B (or a 2-D b), got "
                            f"shapes {tuple(a.shape)} and {tuple(b.shape)}")
    if out is not None and tuple(out.shape) != (a.shape[0], a.shape[1], b.shape[2]):
        raise ArgumentError(f"out must have shape {(a.shape[0], a.shape[1], b.shape[2])}, got {tuple(out.shape)}")
    if all(value is None for name, value in epilogue.items() if name != "out_dtype"):
        # grouped imports this module, so it is imported here, not with it; the lookup is cheaper per call.
        grouped = sys.modules.get("warpspec.ops.grouped") or importlib.import_module("warpspec.ops.grouped")
        result = grouped.batched_matmul(a, b, out, epilogue["out_dtype"])
        if result is not None:
            return result
    if out is not None:
        for index in range(a.shape[0]):
            matmul(a[index], b[index], out=out[index], **epilogue)
        return out
    if a.shape[0] == 0:  # no batch to stack: one product of no rows, for the checks and the result's dtype
        k, n = b.shape[1], b.shape[2]
        weights = np.zeros((k, n), b.dtype) if kind == "numpy" else b.new_zeros((k, n))
        return matmul(a.reshape(0, k), weights, **epilogue).reshape(0, a.shape[1], n)
    results = [matmul(a[index], b[index], **epilogue) for index in range(a.shape[0])]
    return np.stack(results) if kind == "numpy" else sys.modules["torch"].stack(results)


def _padded_output(empty, problem: Problem, dtype):
    """A new [M, N] output from ``empty(shape, dtype=...)`` whose rows are padded to TMA's 16-byte pitch (a view of
    the first N columns when N * element size is not a multiple of 16, as for N = 1)."""
    per_row = TMA_ALIGNMENT // problem.out_dtype.nbytes
    pitch = -(-problem.n // per_row) * per_row
    out = empty((problem.m, pitch), dtype=dtype)
    return out if pitch == problem.n else out[:, :problem.n]


def _torch_matmul(a, b, bias, activation, out, out_dtype, scale_a, scale_b):
    """torch tensors: validate, allocate the output, fold the scales on the device, and write the output through
    the custom op, or straight through its implementation where PyTorch's dispatcher would do nothing else
    (``warpspec.torch_ops.dispatch_is_plain``): the dispatcher's own cost is more than a small GEMM's kernel time."""
    torch = sys.modules["torch"]
    if torch.is_grad_enabled() and _any_requires_grad(a, b, bias):
        from warpspec.ops.matmul_grad import differentiable_matmul

        return differentiable_matmul(a, b, bias, activation, out, out_dtype, scale_a, scale_b)
    if torch.compiler.is_compiling():
        return _traced_matmul(torch, a, b, bias, activation, out, out_dtype, scale_a, scale_b)
    found = signature(a, b, bias, activation, out, out_dtype)  # every check, before anything is allocated
    # Registered by the first call even where it runs the implementation or a bound launch: torch.compile, which
    # cannot trace a registration, must find the op there.
    op = _torch_op()
    # torch_ops imports torch, so it is imported here, not with this module; the lookup is cheaper per call.
    support = sys.modules.get("warpspec.torch_ops") or importlib.import_module("warpspec.torch_ops")
    problem = found.problem
    if scale_a is not None or scale_b is not None:
        same_device("a", a, scale_a=scale_a, scale_b=scale_b)
    _check_scales(problem.in_dtype, scale_a, scale_b)
    if out is None:
        out = _padded_output(functools.partial(torch.empty, device=a.device), problem,
                             _torch_dtype(problem.out_dtype))
        found = found.with_output(a, b, bias, out)
    scale = _torch_scale(a, scale_a, scale_b) if problem.in_dtype == float8_e4m3 else None
    if support.dispatch_is_plain(a, b, out, bias, scale):
        _write(found, a, b, out, bias, scale)
    else:
        op(a, b, out, bias, scale, activation or "")
    return out


def _any_requires_grad(*values) -> bool:
    """Whether a torch tensor among ``values`` (None and other values passed over) requires a gradient."""
    return any(getattr(value, "requires_grad", False) for value in values)


class _BoundCalls:
    """What ``_bound_call`` needs of torch, set when the first bound launch is made (``_direct_launch``): until
    then ``tensor`` is None, which no operand's type is, so ``matmul`` never looks for one."""

    tensor: type | None = None  # torch.Tensor: the plain class, which alone gets bound launches (``plain_cuda``)
    grad_enabled: Callable[[], bool]
    compiling: Callable[[], bool]
    dispatcher_idle: Callable[[int], bool]


def _bound_call(a, b, bias, activation, out, out_dtype):
    """An eager call like an earlier one on plain CUDA tensors, through its signature's bound launch
    (``Signature.direct``, which checks the addresses and returns the output): where no gradient is asked for, no
    compiler traces, PyTorch's dispatcher would do nothing else (``warpspec.torch_ops.dispatcher_idle``) and
    launches are direct (no debug mode, no profiler recording). None otherwise, for ``_torch_matmul``'s full path:
    its checks, the op, autograd. This is the whole per-call path of a repeated small GEMM, so it reads the
    operands' description once and nothing else (host time: docs/performance.md)."""
    calls = _BoundCalls
    if calls.compiling():  # first: a compiler tracing this must not trace the lookup
        return None
    try:
        if calls.grad_enabled() and (a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad)):
            return None
        found = _signatures.get(_key(a, b, bias, activation, out, out_dtype))
    except (TypeError, AttributeError):  # no tensor (a numpy b, a list), an unhashable value: the full path names it
        return None
    if found is None:
        return None
    target = found if out is not None else found.allocated
    # An out requiring a gradient goes through the op, whose autograd refuses writing into it (dispatch_is_plain).
    if (target is None or target.direct is None or (out is not None and out.requires_grad)
            or not calls.dispatcher_idle(a.get_device()) or not runtime.direct_launches()):
        return None
    return target.direct(a, b, out, bias)


def _traced_matmul(torch, a, b, bias, activation, out, out_dtype, scale_a, scale_b):
    """``_torch_matmul`` under ``torch.compile``: only what the graph needs (the output and the op); the op's
    fake implementation validates."""
    same_device("a", a, b=b, bias=bias, out=out, scale_a=scale_a, scale_b=scale_b)
    if _op is None:
        # Registered when torch is imported (warpspec.ops), so only a failed registration leaves it missing.
        raise ArgumentError("ops.matmul's custom op warpspec::matmul is not registered, and torch.compile cannot "
                            "trace its registration: call ops.matmul once eagerly before compiling (its error, if "
                            "registering fails, says why)")
    for name, value in (("a", a), ("b", b)):
        if value.dim() != 2:
            raise ArgumentError(f"{name} must be 2-D, got shape {tuple(value.shape)}")
    in_dtype = dtype_of(a)
    if in_dtype not in OUT_DTYPES:
        raise ArgumentError(f"a has dtype {a.dtype}; ops.matmul takes float16, bfloat16 or float8_e4m3")
    _check_scales(in_dtype, scale_a, scale_b)
    if out is None:
        out = torch.empty((a.shape[0], b.shape[1]), dtype=_torch_dtype(_out_dtype(in_dtype, out, out_dtype)),
                          device=a.device)
    scale = _torch_scale(a, scale_a, scale_b) if in_dtype == float8_e4m3 else None
    _op(a, b, out, bias, scale, activation or "")
    return out


# --------------------------------------------------------------------------------------------- validation


def _resolve_dtype(value) -> DType | None:
    """``out_dtype`` as a warpspec dtype: a warpspec dtype, its name, a torch dtype or a numpy dtype/type."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        return dtypes.BY_NAME.get(value)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.dtype):
        return dtypes.of_torch(value)
    try:
        numpy_dtype = np.dtype(value)
    except TypeError:
        return None
    return next((d for d in dtypes.ALL_DTYPES if d.numpy == numpy_dtype), None)


def strides_of(value) -> tuple[int, ...]:
    """Strides in elements of a numpy array (whose strides are bytes) or a torch tensor."""
    if isinstance(value, np.ndarray):
        if any(s % value.itemsize for s in value.strides):
            raise ArgumentError("an array whose strides are not whole elements cannot be read by a kernel")
        return tuple(s // value.itemsize for s in value.strides)
    return tuple(value.stride())


def _fits_tma(view, dtype: DType) -> bool:
    """Whether the row-major view of an operand (``a``, or ``a.T`` when column-major; ``b`` or ``b.T``) is what a
    tensor map describes: each row's elements adjacent, and a positive row pitch of a multiple of 16 bytes (a single
    row has none to check). Anything else (a padded pitch, a strided or broadcast view) is multiplied from an
    aligned copy (``staged_copy``). The start address is checked per call (``run``): it is not part of a
    signature."""
    rows, columns = (int(n) for n in view.shape)
    row_stride, column_stride = strides_of(view)
    if columns > 1 and column_stride != 1:
        return False
    return rows <= 1 or (row_stride > 0 and (row_stride * dtype.nbytes) % TMA_ALIGNMENT == 0)


def staged(found: Signature, a, b) -> tuple:
    """``a`` and ``b`` as the kernel can read them: the operands ``found.staging`` marks copied into rows padded
    to 16 bytes (their layout kept), one extra read and write of each."""
    stage_a, stage_b = found.staging
    return (staged_copy(a, not found.problem.a_k_major) if stage_a else a,
            staged_copy(b, found.problem.b_k_major) if stage_b else b)


def staged_copy(value, transposed: bool):
    """A copy of 2-D array/tensor ``value`` whose rows (of ``value.T`` when ``transposed``: its column-major
    form) are padded to a multiple of 16 bytes and start aligned: a view of the first columns of a wider
    buffer."""
    view = value.T if transposed else value
    rows, columns = (int(s) for s in view.shape)
    itemsize = view.itemsize if isinstance(view, np.ndarray) else view.element_size()
    per_row = TMA_ALIGNMENT // itemsize
    pitch = -(-columns // per_row) * per_row
    if isinstance(view, np.ndarray):
        copy = np.empty((rows, pitch), dtype=view.dtype)[:, :columns]
        copy[...] = view
    else:
        copy = sys.modules["torch"].empty((rows, pitch), dtype=view.dtype, device=view.device)[:, :columns]
        copy.copy_(view)
    return copy.T if transposed else copy


def row_pitch(value, dtype: DType) -> int:
    """The row pitch (elements) that a kernel's view of 2-D operand ``value`` (last axis contiguous) carries: its row
    stride, except for a single row, which has no pitch: nothing steps over it, so it is given the smallest multiple
    of 16 bytes at or above its stride (a tensor map needs one, whatever the row's extent)."""
    stride = strides_of(value)[0]
    if value.shape[0] <= 1:
        per_row = TMA_ALIGNMENT // dtype.nbytes
        return max(1, -(-stride // per_row)) * per_row
    return stride


def _check_pitch(name: str, value, dtype: DType) -> None:
    """ArgumentError unless the row pitch of 2-D operand ``name`` is a multiple of TMA's 16 bytes."""
    stride = row_pitch(value, dtype)
    if (stride * dtype.nbytes) % TMA_ALIGNMENT:
        raise ArgumentError(f"{name}: the row pitch of {name} is {stride} elements = {stride * dtype.nbytes} "
                            f"bytes, which is not a multiple of {TMA_ALIGNMENT} bytes as TMA requires (pad the rows)")


@dataclasses.dataclass
class Signature:
    """What the description of a call's operands (kinds, devices, dtypes, shapes, strides, epilogue) fixes: the
    validated problem, the layout of the kernel's arguments when there is an output to write, and, once such a
    call ran, the pinned Script and the SM count that run it. A signature's operands are on one device (numpy
    arrays and CPU tensors: the emulator), so one Script serves all its calls."""

    problem: Problem
    layout: Layout | None  # None before the output exists, with nothing to compute, or while staging
    #: (a, b): whether the operand's row pitch (or address) is one TMA cannot describe, so a call copies it into
    #: rows padded to 16 bytes first (``staged_copy``) and runs the copies' signature.
    staging: tuple[bool, bool] = (False, False)
    launcher: tuple | None = None  # (pinned Script, SM count, workspace sizes), set by the first launch
    allocated: Signature | None = None  # without an output: the signature with the output ops.matmul allocates
    #: With an output: the bytes each of a, b, out and bias (0 without) reaches from its first element (the
    #: addresses' checks).
    reaches: tuple[int, int, int, int] | None = None
    #: Set by the first launch with plain CUDA tensors: the later calls' launch (``_direct_launch``).
    direct: Callable | None = None

    @property
    def without_products(self) -> bool:
        """Whether the product has K = 0 with elements to write: no kernel runs (``write_epilogue_of_zero``)."""
        problem = self.problem
        return problem.k == 0 and problem.m > 0 and problem.n > 0

    def with_output(self, a, b, bias, out) -> Signature:
        """The signature of these operands with ``out``, the contiguous output allocated for this signature (one
        of the same description every time, so it is looked up once)."""
        if self.allocated is None:
            self.allocated = signature(a, b, bias, self.problem.activation, out, None)
        return self.allocated


#: Signatures by the operands' description: a call like an earlier one costs a dictionary lookup instead of the
#: checks, the schedule's choice and the arguments' layout (small GEMMs are bound by host time). Bounded.
_signatures = Signatures()


def validate(a, b, bias, activation, out, out_dtype) -> Problem:
    """Every check of the operands (``ArgumentError`` naming the argument); the validated problem. The scales
    are checked by ``_check_scales``."""
    return signature(a, b, bias, activation, out, out_dtype).problem


def signature(a, b, bias, activation, out, out_dtype) -> Signature:
    """The operands' ``Signature``: made (``validate``'s checks) at the first call of a description, then looked
    up."""
    try:
        key = _key(a, b, bias, activation, out, out_dtype)
        found = _signatures.get(key)
    except (TypeError, AttributeError):  # not arrays, an unhashable out_dtype or activation, symbolic sizes:
        # the checks say what is wrong, or the signature is made afresh and not kept
        key = found = None
    if found is not None:
        return found
    problem = _validate(a, b, bias, activation, out, out_dtype)
    staging = (False, False)
    if problem.m and problem.n and problem.k:
        staging = (not _fits_tma(a if problem.a_k_major else a.T, problem.in_dtype),
                   not _fits_tma(b.T if problem.b_k_major else b, problem.in_dtype))
    ready = out is not None and problem.m and problem.n and problem.k and not any(staging)
    found = Signature(problem, Layout.of(a, b, out, problem) if ready else None, staging)
    if ready:
        found.reaches = (_reach(a), _reach(b), _reach(out), 0 if bias is None else _reach(bias))
    return _signatures.remember(key, found)


def _key(a, b, bias, activation, out, out_dtype) -> tuple:
    """The operands' description, a signature's key (``describe``); raises TypeError or AttributeError for what is
    no array, an unhashable value raising TypeError when it is looked up."""
    return describe(a), describe(b), describe(bias), describe(out), activation, out_dtype


def _validate(a, b, bias, activation, out, out_dtype) -> Problem:
    optional = {name: value for name, value in (("bias", bias), ("out", out)) if value is not None}
    if same_kind("a", a, b=b, **optional) == "torch":
        same_device("a", a, b=b, **optional)
    for name, value in (("a", a), ("b", b)):
        if len(value.shape) != 2:
            raise ArgumentError(f"{name} must be 2-D, got shape {tuple(value.shape)}")
    m, k = (int(s) for s in a.shape)
    k_b, n = (int(s) for s in b.shape)
    if k_b != k:
        raise ArgumentError(f"b has {k_b} rows but a has {k} columns: a @ b needs b of shape [K, N] = [{k}, N]")
    in_dtype = dtype_of(a)
    if in_dtype not in OUT_DTYPES:
        raise ArgumentError(f"a has dtype {in_dtype.name if in_dtype else a.dtype}; ops.matmul takes float16, "
                            f"bfloat16 or float8_e4m3")
    if dtype_of(b) != in_dtype:
        raise ArgumentError(f"b has dtype {getattr(dtype_of(b), 'name', b.dtype)} but a has {in_dtype.name}: both "
                            f"operands must have one dtype")
    for name, extent in (("M (a.shape[0])", m), ("N (b.shape[1])", n), ("K (a.shape[1])", k)):
        if extent > MAX_EXTENT:
            raise ArgumentError(f"{name} is {extent}: ops.matmul takes extents up to {MAX_EXTENT} (the kernel's "
                                f"sizes are int32)")
    result_dtype = _out_dtype(in_dtype, out, out_dtype)
    _check_epilogue(bias, activation, out, m, n, result_dtype)
    # Nothing to multiply, nothing launched: only the output's description and the epilogue matter (K = 0 writes
    # the epilogue of zero with array operations, whatever the operands' layouts).
    if m == 0 or n == 0 or k == 0:
        return Problem(m, n, k, in_dtype, result_dtype, False, bias is not None, activation)
    a_strides, b_strides = strides_of(a), strides_of(b)
    if out is not None and any(stride < 0 for stride in strides_of(out)):
        raise ArgumentError(f"out has strides {strides_of(out)}: a negative stride (a reversed view such as x[::-1]) "
                            f"cannot be written by the kernel; pass a row-major out")
    # Each operand is read as stored where it is row-major or the transposed view of a row-major tensor; other
    # strides (a strided or broadcast view, a reversed numpy view) are read from a row-major copy (``_fits_tma``
    # marks it for staging), in the form float8 needs for b.
    if a_strides[1] == 1 and (a_strides[0] > 0 or m == 1) or k == 1:
        a_k_major = True
    elif a_strides[0] == 1 and (a_strides[1] > 0 or k == 1) or m == 1:
        a_k_major = False
    else:
        a_k_major = True
    if in_dtype == float8_e4m3 and not a_k_major:
        raise ArgumentError("a: float8 a must be row-major [M, K] (K-major), as torch._scaled_mm requires; a "
                            "column-major a (x.T) is supported for float16 and bfloat16 only")
    if n == 1:  # one column: w.T of a one-row w (unit row stride) is the K-major form, anything else row-major
        b_k_major = b_strides[0] == 1 and k > 1
    elif b_strides[1] == 1 and (b_strides[0] > 0 or k == 1):
        b_k_major = False
    elif b_strides[0] == 1 and (b_strides[1] > 0 or n == 1) or k == 1:
        b_k_major = True
    else:
        b_k_major = in_dtype == float8_e4m3
    if in_dtype == float8_e4m3 and not b_k_major:
        raise ArgumentError("b: float8 b must be the transposed view of a K-major [N, K] tensor (w.T), as "
                            "torch._scaled_mm requires; a row-major [K, N] b is not supported for float8")
    if out is not None:
        if strides_of(out)[1] != 1 and n > 1:
            raise ArgumentError(f"out must be row-major (unit column stride), got strides {strides_of(out)}")
        for name, value in (("a", a), ("b", b)):
            if _overlap(out, value):
                raise _shares_memory(name)
        _check_pitch("out", out, result_dtype)
    if bias is not None and n > 1 and strides_of(bias)[0] != 1:
        raise ArgumentError(f"bias must be contiguous, got stride {strides_of(bias)[0]}")
    return Problem(m, n, k, in_dtype, result_dtype, b_k_major, bias is not None, activation, a_k_major)


def _check_epilogue(bias, activation, out, m: int, n: int, result_dtype: DType) -> None:
    """The checks of the epilogue's operands that hold for every problem, an empty one included: ``out``'s shape,
    the activation's name, the bias's shape and dtype."""
    if out is not None and tuple(out.shape) != (m, n):
        raise ArgumentError(f"out must have shape ({m}, {n}), got {tuple(out.shape)}")
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        raise ArgumentError("out is read-only, and ops.matmul writes the result into it: pass a writeable out (or "
                            "none, for a new array)")
    if activation not in ACTIVATIONS:
        raise ArgumentError(f"activation must be one of None, 'relu', 'gelu', 'silu'; got {activation!r}")
    if bias is not None:
        if tuple(bias.shape) != (n,):
            raise ArgumentError(f"bias must have shape ({n},) (one value per column of the result), got "
                                f"{tuple(bias.shape)}")
        if dtype_of(bias) != result_dtype:
            raise ArgumentError(f"bias has dtype {getattr(dtype_of(bias), 'name', bias.dtype)}; it must have the "
                                f"output dtype, {result_dtype.name}")


def _out_dtype(in_dtype: DType, out, out_dtype) -> DType:
    allowed = OUT_DTYPES[in_dtype]
    names = ", ".join(d.name for d in allowed)
    if out_dtype is not None:
        resolved = _resolve_dtype(out_dtype)
        if resolved not in allowed:
            raise ArgumentError(f"out_dtype {out_dtype!r} is not supported for {in_dtype.name} inputs; use one of "
                                f"{names}")
    if out is not None:
        given = dtype_of(out)
        if out_dtype is not None and given != resolved:
            raise ArgumentError(f"out has dtype {getattr(given, 'name', out.dtype)} but out_dtype is "
                                f"{resolved.name}")
        if given not in allowed:
            raise ArgumentError(f"out has dtype {getattr(given, 'name', out.dtype)}; for {in_dtype.name} inputs it "
                                f"must be one of {names}")
        return given
    return resolved if out_dtype is not None else allowed[0]


def _check_scales(in_dtype: DType, scale_a, scale_b) -> None:
    scaled = in_dtype == float8_e4m3
    for name, value in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not scaled:
            if value is not None:
                raise ArgumentError(f"{name} is for float8 inputs only; a is {in_dtype.name}")
            continue
        if value is None:
            raise ArgumentError(f"{name} is required for float8 inputs: a Python float or a one-element float32 "
                                f"array/tensor")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            continue
        if isinstance(value, np.ndarray) or _kind_or_none(value) == "torch":
            if dtype_of(value) != float32 or math.prod(value.shape) != 1:
                raise ArgumentError(f"{name} must be a one-element float32 array/tensor, got dtype "
                                    f"{value.dtype} and shape {tuple(value.shape)}")
            continue
        raise ArgumentError(f"{name} must be a Python float or a one-element float32 array/tensor, got "
                            f"{type(value).__name__}")


def _kind_or_none(value) -> str | None:
    torch = sys.modules.get("torch")
    return "torch" if torch is not None and isinstance(value, torch.Tensor) else None


def _torch_dtype(dtype: DType):
    torch = sys.modules["torch"]
    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype.name]


def _numpy_scale(scale_a, scale_b) -> np.ndarray:
    """scale_a · scale_b as the one-element float32 array the kernel reads."""
    value = np.float32(np.asarray(scale_a, dtype=np.float32).reshape(())) * \
        np.float32(np.asarray(scale_b, dtype=np.float32).reshape(()))
    return np.array([value], dtype=np.float32)


def _torch_scale(a, scale_a, scale_b):
    """scale_a · scale_b as a one-element float32 tensor on ``a``'s device, computed there (no host sync)."""
    torch = sys.modules["torch"]

    def tensor(value):
        if isinstance(value, torch.Tensor):
            return value.reshape(1)
        return torch.full((1,), float(value), dtype=torch.float32, device=a.device)

    return tensor(scale_a) * tensor(scale_b)


# ------------------------------------------------------------------------------------------------ launch


def launch(found: Signature, a, b, out, bias, scale) -> None:
    """``run``, after copying the operands whose pitch TMA cannot describe (``staged``) and looking up the
    copies' signature; with K = 0, ``write_epilogue_of_zero`` instead (no kernel: TMA has no empty extent)."""
    if found.without_products:
        write_epilogue_of_zero(found.problem, out, bias)
        return
    if any(found.staging):
        a, b = staged(found, a, b)
        found = signature(a, b, bias, found.problem.activation, out, None)
    if found.layout is not None:
        run(found, a, b, out, bias, scale)


def write_epilogue_of_zero(problem: Problem, out, bias) -> None:
    """Write ``out`` [M, N] of a product with K = 0, whose every element sums no products: the epilogue of zero,
    ``activation(bias)`` in each row, as ``torch.addmm`` gives (zeros without a bias: each activation maps 0 to 0),
    computed in float32 and rounded to the output dtype. For torch tensors, torch's own activations (the forms the
    kernel computes: gelu's tanh approximation)."""
    if not isinstance(out, np.ndarray):
        torch = sys.modules["torch"]
        if bias is None:
            out.zero_()
            return
        functional = torch.nn.functional
        value = {"relu": torch.relu, "gelu": lambda x: functional.gelu(x, approximate="tanh"),
                 "silu": functional.silu}.get(problem.activation, lambda x: x)(bias.float())
        out.copy_(value.to(out.dtype).expand(out.shape))
        return
    value = np.zeros(problem.n, np.float32) if bias is None else np.asarray(bias, dtype=np.float32)
    if problem.activation == "relu":
        value = np.maximum(value, np.float32(0))
    elif problem.activation == "gelu":
        value = value * (np.tanh((value + value ** 3 * np.float32(0.044715)) * np.float32(GELU_SCALE)) + 1) / 2
    elif problem.activation == "silu":
        value = value * (np.tanh(value / 2) / 2 + np.float32(0.5))
    out[...] = dtypes.round_to(problem.out_dtype, value)[None, :]


def run(found: Signature, a, b, out, bias, scale) -> None:
    """Run the kernel of the operands' signature ``found`` (with an output) on them, on the selected back end: the
    pinned Script chosen at the signature's first launch (``script_for``) called with the layout's arguments."""
    check_addresses(found, address(a), address(b), address(out), 0 if bias is None else address(bias))
    first = found.launcher is None
    if first:
        num_sms = sm_count()
        stand_in = placeholders_like(out)
        script = script_for(found.problem, found.layout.arguments(a, b, out, bias, scale, stand_in, num_sms))
        problem = found.problem
        found.launcher = (script, num_sms, workspace_sizes(problem.m, problem.n, num_sms, script.schedule()))
    script, num_sms, (elements, flag_count) = found.launcher
    work = workspace_like(out, elements, flag_count) if elements else placeholders_like(out)
    args = found.layout.arguments(a, b, out, bias, scale, work, num_sms)
    script(*args)
    if first and scale is None and plain_cuda(a, b, out, bias):
        found.direct = _direct_launch(found, runtime.pointer_launcher(script, args), out)


def check_addresses(found: Signature, a: int, b: int, out: int, bias: int) -> None:
    """ArgumentError unless the addresses of a call's operands (of signature ``found``; ``bias`` 0 without one) are
    16-byte aligned where TMA reads them, and ``out``'s memory is apart from the inputs': made on every call, as a
    cached signature fixes the operands' description and not where they are."""
    if (a | b | out) % TMA_ALIGNMENT:
        name = next(name for name, where in (("a", a), ("b", b), ("out", out)) if where % TMA_ALIGNMENT)
        raise ArgumentError(f"{name} starts at an address that is not a multiple of {TMA_ALIGNMENT} bytes, as TMA "
                            f"requires (a slice that starts mid-row?)")
    reach_a, reach_b, reach_out, reach_bias = found.reaches
    for name, start, reach in (("a", a, reach_a), ("b", b, reach_b), ("bias", bias, reach_bias)):
        if reach and start < out + reach_out and out < start + reach:
            raise _shares_memory(name)


def _shares_memory(name: str) -> ArgumentError:
    return ArgumentError(f"out shares memory with {name}: the kernel would overwrite {name} while it still reads it; "
                         f"pass a separate out (or none, for a new array)")


def _direct_launch(found: Signature, launch, out):
    """The launch of ``found``'s later eager calls with plain CUDA tensors (``_bound_call`` takes it when
    ``warpspec.torch_ops.dispatcher_idle``): ``call(a, b, out, bias)`` allocates the output when ``out`` is None,
    checks the addresses, takes the stream's workspace and launches with the operands' addresses alone
    (``launch``, ``runtime.pointer_launcher``'s), then advances a given ``out``'s version counter; it returns ``out``.
    Inside CUDA graph capture it takes ``run`` instead, whose workspace is the graph's. None without a launch."""
    if launch is None:
        return None
    torch = sys.modules["torch"]
    C = torch._C
    calls = _BoundCalls
    calls.grad_enabled, calls.compiling = torch.is_grad_enabled, torch.compiler.is_compiling
    calls.dispatcher_idle = sys.modules["warpspec.torch_ops"].dispatcher_idle
    calls.tensor = torch.Tensor
    capturing, current_stream = C._cuda_isCurrentStreamCapturing, C._cuda_getCurrentRawStream
    bump, empty = torch.autograd.graph.increment_version, torch.empty_strided
    device, index, dtype = out.device, out.device.index, out.dtype
    shape, strides = tuple(out.shape), out.stride()  # the description the signature's key holds
    _, _, (elements, flag_count) = found.launcher
    placeholder_partials, placeholder_flags = (t.data_ptr() for t in placeholders_like(out))
    reach_a, reach_b, reach_out, reach_bias = found.reaches

    def call(a, b, out, bias):
        given = out is not None
        if not given:
            out = empty(shape, strides, dtype=dtype, device=device)
        pa, pb, pc = a.data_ptr(), b.data_ptr(), out.data_ptr()
        pbias = pc if bias is None else bias.data_ptr()  # the kernel takes out for a missing bias, never reading it
        if ((pa | pb | pc) % TMA_ALIGNMENT or (pa < pc + reach_out and pc < pa + reach_a)
                or (pb < pc + reach_out and pc < pb + reach_b)
                or (bias is not None and pbias < pc + reach_out and pc < pbias + reach_bias)):
            check_addresses(found, pa, pb, pc, 0 if bias is None else pbias)  # raises its message
        stream = current_stream(index)
        if elements:
            if capturing():
                run(found, a, b, out, bias, None)
                bump(out)
                return out
            partials, flags = stream_workspace(device, stream, elements, flag_count)
            launch(pa, pb, pc, pbias, partials.data_ptr(), flags.data_ptr(), stream=stream)
        else:
            launch(pa, pb, pc, pbias, placeholder_partials, placeholder_flags, stream=stream)
        if given:  # a new output has no earlier value for autograd to have saved
            bump(out)
        return out

    return call


def arguments(a, b, out, bias, scale, problem: Problem) -> tuple:
    """The kernel's call arguments for ``problem`` on these operands (``Layout.arguments``), with the SM count of
    the GPU launches go to (``sm_count``) and a stream-K workspace that fits every schedule of the space."""
    num_sms = sm_count()
    work = workspace_like(out, *workspace_sizes(problem.m, problem.n, num_sms))
    return Layout.of(a, b, out, problem).arguments(a, b, out, bias, scale, work, num_sms)


@dataclasses.dataclass(frozen=True)
class Layout:
    """How validated operands become the kernel's call arguments: sizes and pitches, which arrays pass as they
    are (contiguous) and which as the span of memory their rows cover (``span``; the kernel's views carry the
    pitches), b as the [N, K] tensor it views when K-major, ``out`` standing in for a missing bias (never read)
    and, for float8, the scale."""

    sizes: tuple[int, ...]  # m, n, k and the row pitches of a's view, of b's view and of out
    contiguous: tuple[bool, bool, bool]  # a's view, b's view, out (a bias, validated contiguous, always is)
    b_k_major: bool
    scaled: bool
    a_k_major: bool = True

    @classmethod
    def of(cls, a, b, out, problem: Problem) -> Layout:
        """The layout of ``problem``'s operands (their strides are what it depends on)."""
        a_view = a if problem.a_k_major else a.T
        b_view = b.T if problem.b_k_major else b
        sizes = (problem.m, problem.n, problem.k, row_pitch(a_view, problem.in_dtype),
                 row_pitch(b_view, problem.in_dtype), row_pitch(out, problem.out_dtype))
        contiguous = tuple(span(value) is value for value in (a_view, b_view, out))
        return cls(sizes, contiguous, problem.b_k_major, problem.in_dtype == float8_e4m3, problem.a_k_major)

    def arguments(self, a, b, out, bias, scale, workspace: tuple, num_sms: int) -> tuple:
        """The call arguments: sizes, pitches, arrays, scale (float8), the stream-K ``workspace`` (partials,
        flags: ``warpspec.ops.workspace``), ``num_sms``."""
        whole_a, whole_b, whole_out = self.contiguous
        a_view = a if self.a_k_major else a.T
        b_view = b.T if self.b_k_major else b
        c = out if whole_out else span(out)
        arrays = (a_view if whole_a else span(a_view), b_view if whole_b else span(b_view), c,
                  c if bias is None else bias)
        return self.sizes + arrays + ((scale,) if self.scaled else ()) + tuple(workspace) + (num_sms,)


def span(value):
    """``value`` itself when contiguous, else the contiguous 1-D view of the memory from its first element to its
    last (a strided 2-D slice of a wider array): what both back ends take for a kernel view with row pitches."""
    if isinstance(value, np.ndarray):
        if value.flags.c_contiguous:
            return value
        needed = sum((extent - 1) * stride for extent, stride in zip(value.shape, strides_of(value))) + 1
        return np.lib.stride_tricks.as_strided(value, shape=(needed,), strides=(value.itemsize,))
    if value.is_contiguous():
        return value
    needed = sum((extent - 1) * stride for extent, stride in zip(value.shape, value.stride())) + 1
    return value.as_strided((needed,), (1,))


def _overlap(first, second) -> bool:
    """Whether the memory spans of two arrays/tensors (first to last element) overlap."""
    def bounds(value):
        low = address(value)
        return low, low + _reach(value)

    if 0 in tuple(first.shape) or 0 in tuple(second.shape):
        return False
    if not (has_memory(first) and has_memory(second)):  # traced by torch.compile: checked when the op runs
        return False
    (low, high), (start, end) = bounds(first), bounds(second)
    return start < high and low < end


def _reach(value) -> int:
    """The bytes from the first element of an array or tensor to one past its last (0 for no elements)."""
    if 0 in tuple(value.shape):
        return 0
    itemsize = value.itemsize if isinstance(value, np.ndarray) else value.element_size()
    return (sum((extent - 1) * stride for extent, stride in zip(value.shape, strides_of(value))) + 1) * itemsize


def gemm_script(problem: Problem, **arguments):
    """The GEMM Script of the problem's dtypes (``Gemm``, or ``ScaledGemm`` for float8 inputs) constructed with
    ``arguments`` (the variant and, to pin one, the schedule)."""
    return gemm_class(problem.in_dtype, problem.split_family)(problem.in_dtype, problem.out_dtype, **arguments)


def dtypes_key(problem: Problem) -> tuple[str, str]:
    """(input dtype name, output dtype name): what, with the variant, selects the kernel."""
    return problem.in_dtype.name, problem.out_dtype.name


_tuned: dict = {}  # (dtypes, variant, split family) -> TunedScript
_chosen: dict = {}  # (dtypes, variant, size buckets, back end, device) -> pinned Script


def tuned_script(problem: Problem):
    """The autotuned Script (all schedules) of the problem's dtypes and variant."""
    key = (dtypes_key(problem), problem.variant, problem.split_family)
    if key not in _tuned:
        b_k_major, has_bias, activation, a_k_major = problem.variant
        extra = {} if a_k_major else {"a_k_major": False}  # the K-major kernels keep their constructor key
        _tuned[key] = gemm_script(problem, b_k_major=b_k_major, has_bias=has_bias, activation=activation, **extra)
    return _tuned[key]


def script_for(problem: Problem, args: tuple):
    """The pinned Script that runs ``problem``: remembered per size buckets, chosen by ``choose_schedule``."""
    backend = runtime.get_backend()
    device = None
    if backend == "cuda":
        device = runtime.current_device()
    key = (dtypes_key(problem), problem.variant, buckets(problem), backend, device)
    script = _chosen.get(key)
    if script is None:
        script = _chosen[key] = _buildable(problem, choose_schedule(problem, args, backend == "cuda"), args)
    return script


def _buildable(problem: Problem, schedule: dict, args: tuple):
    """The Script pinned to ``schedule`` when its kernel builds for ``problem``, else to the size rule's schedule,
    else to the first that builds: a shipped default is keyed by the input dtype alone, and a float32 output's
    epilogue buffer may not fit in the shared memory its schedule leaves."""
    tuned = tuned_script(problem)
    for candidate in (schedule, heuristic_schedule(problem)):
        script = tuned.instantiate(candidate)
        try:
            runtime.kernel_for(script, {})
            return script
        except CompileError:
            continue
    return tuned.first_valid(args, {})


def forget_choices() -> None:
    """Forget the schedules this process chose (after a tuning run, the next call of each shape looks again)."""
    _chosen.clear()
    _signatures.clear()  # they hold the pinned Scripts their first launches chose


def chosen_schedule(problem: Problem) -> dict | None:
    """The schedule this process runs for calls like ``problem``, once one has run (None before)."""
    for (dtype_names, variant, sizes, _, _), script in _chosen.items():
        if (dtype_names, variant, sizes) == (dtypes_key(problem), problem.variant, buckets(problem)):
            return script.schedule()
    return None


def buckets(problem: Problem) -> tuple[int, int, int]:
    """The size buckets of M, N and K (``warpspec.tune.cache.size_bucket``), as the tuner keys winners."""
    return size_bucket(problem.m), size_bucket(problem.n), size_bucket(problem.k)


def choose_schedule(problem: Problem, args: tuple, on_gpu: bool) -> dict:
    """A stored tuning winner (GPU only: the problem's own variant, else the plain variant's), else the shipped
    default of the dtype and size buckets, else ``heuristic_schedule``."""
    if on_gpu:
        from warpspec.tune.tuner import stored_schedule

        plain = dataclasses.replace(problem, has_bias=False, activation=None)
        for candidate in (problem, plain):
            # The plain kernel is called as ``arguments`` calls it without a bias: out (8) stands in for it (9).
            candidate_args = args if candidate is problem else args[:9] + (args[8],) + args[10:]
            schedule = stored_schedule(tuned_script(candidate), candidate_args, {})
            if schedule is not None:
                return schedule
    bucket = bucket_name(buckets(problem))
    table = shipped_defaults().get(problem.in_dtype.name, {})
    schedule = table.get(bucket)
    space = tuned_script(problem).schedules()
    if schedule is None:
        if not problem.split_family:
            schedule = neighbouring_default(problem, table, space)
        return heuristic_schedule(problem) if schedule is None else dict(schedule)
    if schedule not in space:
        kernel = gemm_class(problem.in_dtype, problem.split_family).__name__
        raise DefaultsFileError(f"{DEFAULTS_FILE}: the {problem.in_dtype.name} entry {bucket} is {schedule}, which "
                                f"is not a schedule of its kernel ({kernel}: keys {', '.join(sorted(space[0]))}); "
                                f"{RESTORE_DEFAULTS}")
    return dict(schedule)


def neighbouring_default(problem: Problem, table: dict, space: list) -> dict | None:
    """For a tile-walk problem whose size buckets hold no shipped default: the default of the nearest M bucket
    above and the nearest below with the same N and K buckets whose schedule is of the tile walk (in ``space``),
    the one whose grid fills the last wave of SMs best (``wave_fill``), the larger M's on a tie. None when
    neither exists.

    The tuned table holds the M of a model's linear layers (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 8192)
    over llm_shapes.py's weights. At an M between them (4096, say) a neighbour's tuned tiles beat the tile walk's
    size rule, whose tiles were never tuned (on an H100, bf16: 4096 x 1024 x 4096 0.74 -> 0.97x cuBLAS; before
    M = 512 was tuned, 512 x 6144 x 4096 0.66 -> 0.93x and 512 x 14336 x 4096 0.79 -> 1.07x; docs/performance.md,
    run K3). The split family keeps its own size rule: there a neighbour's tiles lost to it at every M tried (16,
    128, 512), by up to 33%."""
    m_bucket, n_bucket, k_bucket = buckets(problem)
    below, above = {}, {}
    for name, schedule in table.items():
        m, n, k = (int(size) for size in name.split("x"))
        if (n, k) != (n_bucket, k_bucket) or m == m_bucket or schedule not in space:
            continue
        side = below if m < m_bucket else above
        side[m] = schedule
    nearest = [side[pick(side)] for side, pick in ((above, min), (below, max)) if side]
    return max(nearest, key=lambda schedule: wave_fill(problem, schedule), default=None)


def wave_fill(problem: Problem, schedule: dict) -> float:
    """The fraction of the last wave's SMs that a tile-walk ``schedule``'s tiles of ``problem`` keep busy, 1 for
    a full wave: tiles / (waves × ``NUM_SMS``). A stream-K schedule splits its last wave evenly (1)."""
    if schedule["stream_k"]:
        return 1.0
    tiles = -(-problem.m // schedule["block_m"]) * -(-problem.n // schedule["block_n"])
    return tiles / (-(-tiles // NUM_SMS) * NUM_SMS)


def bucket_name(sizes) -> str:
    """``"MxNxK"`` of size buckets: the key of the shipped defaults."""
    return "x".join(str(s) for s in sizes)


_defaults: dict | None = None


#: How a broken defaults file is put right, in its errors.
RESTORE_DEFAULTS = "restore it from the warpspec package, or rewrite its entries with warpspec tune --write-defaults"


def shipped_defaults() -> dict:
    """The shipped defaults: ``{input dtype name: {"MxNxK" size buckets: schedule}}`` from defaults.json
    (``read_defaults``)."""
    global _defaults
    if _defaults is None:
        _defaults = read_defaults(DEFAULTS_FILE)["schedules"]
    return _defaults


def read_defaults(path: pathlib.Path) -> dict:
    """The defaults file at ``path``: ``{"schedules": {input dtype name: {"MxNxK": schedule}}, ...}``. A file that
    is not such a table is a ``DefaultsFileError`` naming it; one that cannot be read, an ``OSError``."""
    try:
        table = json.loads(path.read_text())
    except ValueError as error:  # not UTF-8, or not JSON
        raise DefaultsFileError(f"{path} is not JSON ({error}); {RESTORE_DEFAULTS}") from None
    schedules = table.get("schedules") if isinstance(table, dict) else None
    if not isinstance(schedules, dict) or not all(
            isinstance(buckets, dict) and all(isinstance(s, dict) for s in buckets.values())
            for buckets in schedules.values()):
        raise DefaultsFileError(f"{path} is not a table of shipped defaults ({{\"schedules\": {{dtype: "
                                f"{{\"MxNxK\": schedule}}}}}}); {RESTORE_DEFAULTS}")
    return table


def heuristic_schedule(problem: Problem) -> dict:
    """A schedule by problem size when nothing was tuned or shipped: 64-row/column tiles for small problems (few
    blocks otherwise), one tile per block; for large ones examples/matmul_v6.py's fastest, persistent 128×256
    tiles in 3 stages, 2 for a float32 output, whose epilogue buffer takes twice the shared memory, with the
    stream-K split of a partial last wave (``warpspec.ops.kernels.StreamK``, which splits only where it paid: 1.030×
    cuBLAS at 8192³ fp16 against 1.013× for whole tiles in the same run, docs/performance.md run 25). Problems of
    the split family take its own rule, ``split_schedule``."""
    if problem.split_family:
        return split_schedule(problem)
    if problem.m >= 2048 and problem.n >= 2048:
        return {"num_stages": 2 if problem.out_dtype == float32 else 3, "block_m": 128, "block_n": 256,
                "persistent": True, "stream_k": True}
    block_m = 64 if problem.m <= 128 else 128
    block_n = 64 if problem.n <= 128 else 128
    k_tiles = -(-problem.k // block_k_for(problem.in_dtype))
    return {"num_stages": 2 if k_tiles <= 2 else 4, "block_m": block_m, "block_n": block_n, "persistent": False,
            "stream_k": False}


#: The split family's size rule, in order of preference: (block_m, block_n, split_k) of the tile walk over M × N,
#: and (block_m, split_k) of the transposed product over N (``swap_ab``; its block_n covers M). Fewer splits and
#: larger tiles first; benchmarks/small_m.py's tuner tables on the H200 (docs/performance.md) put the winners there.
PLAIN_CHOICES = ((128, 128, 1), (64, 128, 1), (64, 64, 1), (64, 128, 2), (64, 64, 2))
SWAP_CHOICES = ((128, 1), (64, 1), (128, 2), (64, 2), (128, 4), (64, 4))
#: Up to this M the split family computes the product transposed.
SWAP_M = 32
#: The fewest K-tiles a split part streams, so that its ring fills before it drains.
MIN_PART_K_TILES = 8


def split_schedule(problem: Problem) -> dict:
    """The split family's size rule (``split_family`` problems): up to M = ``SWAP_M`` the product computed
    transposed (``swap_ab``) in tiles of the fewest of 8, 16 or 32 columns that hold M, larger M in tiles of M × N;
    of ``SWAP_CHOICES`` or ``PLAIN_CHOICES``, the first whose grid fills at least half the SMs (within one block
    per SM when split) with parts of at least ``MIN_PART_K_TILES`` K-tiles, else the one with the most blocks.
    8 stages (6 for 128 × 128 tiles, whose 8 do not fit)."""
    k_tiles = -(-problem.k // block_k_for(problem.in_dtype))
    if problem.m <= SWAP_M:
        block_n = next(c for c in (8, 16, 32) if c >= problem.m)
        options = [(True, block_m, block_n, split) for block_m, split in SWAP_CHOICES]
    else:
        options = [(False, block_m, block_n, split) for block_m, block_n, split in PLAIN_CHOICES]

    def blocks(option) -> int:
        swap, block_m, block_n, split = option
        rows, columns = (problem.n, problem.m) if swap else (problem.m, problem.n)
        return -(-rows // block_m) * -(-columns // block_n) * split

    options = [o for o in options if o[3] == 1 or k_tiles >= MIN_PART_K_TILES * o[3]]
    filling = [o for o in options if 2 * blocks(o) >= NUM_SMS and (o[3] == 1 or blocks(o) <= NUM_SMS)]
    swap, block_m, block_n, split = filling[0] if filling else max(options, key=blocks)
    stages = 6 if (block_m, block_n) == (128, 128) else 8
    return {"swap_ab": swap, "block_m": block_m, "block_n": block_n, "split_k": split, "num_stages": stages}


# --------------------------------------------------------------------------------------------- torch op

_op = None


def _torch_op():
    """The custom op ``warpspec::matmul(a, b, out!, bias?, scale?, activation)``: registered when this module is
    imported after torch, else at the first call with torch tensors (torch stays optional). Registering is not
    something ``torch.compile`` can trace, so import torch before warpspec.ops, or call once eagerly, before
    compiling."""
    global _op
    if _op is None:
        from warpspec.torch_ops import custom_op

        _op = custom_op("warpspec::matmul", _op_implementation, fake=_op_fake, mutates_args=("out",),
                        schema="(Tensor a, Tensor b, Tensor(a!) out, Tensor? bias, Tensor? scale, str activation) "
                               "-> ()")
    return _op


def _op_implementation(a, b, out, bias, scale, activation):
    """The op's implementation for real tensors (CPU and CUDA): the operands are validated (``ArgumentError``),
    then ``out`` is written."""
    _write(_op_signature(a, b, out, bias, scale, activation), a, b, out, bias, scale)


def _write(found: Signature, a, b, out, bias, scale) -> None:
    """Write torch tensor ``out`` (``run``), advancing its version counter as an in-place op does, so autograd
    refuses a backward through values this call overwrote."""
    if found.layout is not None or any(found.staging) or found.without_products:
        launch(found, a, b, out, bias, scale)
        sys.modules["torch"].autograd.graph.increment_version(out)


def _op_fake(a, b, out, bias, scale, activation):
    """The op's fake implementation (torch.compile tracing with fake or meta tensors): the same checks; the
    output exists already, so nothing else happens."""
    _op_signature(a, b, out, bias, scale, activation)


def _op_signature(a, b, out, bias, scale, activation) -> Signature:
    found = signature(a, b, bias, activation or None, out, None)
    if found.problem.in_dtype == float8_e4m3 and (scale is None or dtype_of(scale) != float32 or scale.numel() != 1):
        raise ArgumentError("scale: float8 inputs need the one-element float32 scale tensor (scale_a * scale_b)")
    return found


# ------------------------------------------------------------------------------------------------ tuning


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """``"8192x8192x8192,4096x14336x4096"`` -> [(M, N, K), ...]; an ArgumentError names a malformed shape."""
    shapes = []
    for part in text.split(","):
        pieces = part.strip().lower().split("x")
        try:
            shape = tuple(int(p) for p in pieces)
        except ValueError:
            shape = ()
        if len(shape) != 3 or min(shape) < 1:
            raise ArgumentError(f"shapes: {part.strip()!r} is not MxNxK with positive integers (e.g. 8192x8192x8192)")
        shapes.append(shape)
    return shapes


def tune_matmul(shapes, dtype="float16", *, b_layout="k-major", out_dtype=None, progress=None) -> dict:
    """Tune ``ops.matmul``'s kernel on the GPU for each (M, N, K) of ``shapes`` and store the winners in the
    tuning cache, where later calls (in any process) find them. ``dtype``: float16, bfloat16 or float8_e4m3;
    ``b_layout``: ``"k-major"`` (b = w.T) or ``"n-major"`` (row-major b; not for float8). The winner of the plain
    kernel also serves calls with a bias or an activation. ``progress(line)`` (e.g. ``print``) hears about each
    shape. Returns ``{input dtype name: {"MxNxK" buckets: schedule}}``, the shape of defaults.json's table."""
    in_dtype = _resolve_dtype(dtype)
    if in_dtype not in OUT_DTYPES:
        raise ArgumentError(f"dtype {dtype!r} is not one ops.matmul takes: float16, bfloat16 or float8_e4m3")
    if b_layout not in ("k-major", "n-major"):
        raise ArgumentError(f"b_layout must be 'k-major' or 'n-major', got {b_layout!r}")
    if in_dtype == float8_e4m3 and b_layout != "k-major":
        raise ArgumentError("b_layout: float8 b is K-major only")
    result_dtype = OUT_DTYPES[in_dtype][0] if out_dtype is None else _resolve_dtype(out_dtype)
    if result_dtype not in OUT_DTYPES[in_dtype]:
        raise ArgumentError(f"out_dtype {out_dtype!r} is not supported for {in_dtype.name} inputs")
    table: dict = {}
    with runtime.use_backend("cuda"):
        for m, n, k in shapes:
            problem = Problem(m, n, k, in_dtype, result_dtype, b_layout == "k-major", False, None)
            started = time.perf_counter()
            tuned = tuned_script(problem)
            args, buffers = tuning_arguments(problem)
            tuned(*args)
            runtime.synchronize()
            winner = tuned.last_report.winner
            table.setdefault(in_dtype.name, {})[bucket_name(buckets(problem))] = dict(winner.schedule)
            forget_choices()  # calls made before this run chose without the new winner
            if progress is not None:
                progress(f"{in_dtype.name} {m}x{n}x{k}: {tuned.last_report.summary()}; winner {winner.label}, "
                         f"{winner.time_ms:.3f} ms ({time.perf_counter() - started:.1f} s)")
            del buffers  # the device memory goes before the next shape's is allocated
    return table


def tuning_arguments(problem: Problem) -> tuple[tuple, list]:
    """The kernel's call arguments for tuning ``problem`` without PyTorch, and the device buffers they live in
    (keep them until the run is over): random operands (the tensor cores' power, hence their clock, depends on
    the data), b stored [N, K] when K-major, the output standing in for the bias, a scale of 1 for float8."""
    rng = np.random.default_rng(0)
    buffers = []

    def device(shape, dtype, random=True):
        buffer = runtime.device_buffer(math.prod(shape) * dtype.nbytes)
        buffers.append(buffer)
        if random:
            buffer.upload(dtypes.round_to(dtype, rng.standard_normal(shape, np.float32)))
        return buffer.array(shape, dtype)

    def zeros(shape, dtype):
        array = device(shape, dtype, random=False)
        buffers[-1].upload(np.zeros(shape, dtype.numpy))
        return array

    m, n, k = problem.m, problem.n, problem.k
    b_shape = (n, k) if problem.b_k_major else (k, n)
    out = device((m, n), problem.out_dtype, random=False)
    args = (m, n, k, k, b_shape[1], n, device((m, k), problem.in_dtype), device(b_shape, problem.in_dtype), out, out)
    if problem.in_dtype == float8_e4m3:
        scale = device((1,), float32, random=False)
        buffers[-1].upload(np.ones(1, np.float32))
        args += (scale,)
    num_sms = sm_count()
    # The stream-K schedules' partials and flags (zero: every launch leaves them so for the next).
    elements, flag_count = workspace_sizes(m, n, num_sms)
    args += (zeros((elements,), float32), zeros((flag_count,), dtypes.int32))
    return args + (num_sms,), buffers


def write_defaults(table: dict, path: pathlib.Path = DEFAULTS_FILE) -> None:
    """Merge ``table`` (``tune_matmul``'s result) into the shipped defaults file at ``path``. Concurrent writers
    take turns (``files.exclusive``: each reads the file after the last one's write, so none loses another's
    entries), and the file is replaced whole (``files.replace_file``): a crash or a reader never meets half a file.
    Raises ``OSError`` when the file cannot be read or written, and ``DefaultsFileError`` (a ``ValueError``)
    when it is not a defaults file (``read_defaults``)."""
    global _defaults
    with exclusive(path):
        current = read_defaults(path) if path.exists() else {"schedules": {}}
        for dtype_name, schedules in table.items():
            current["schedules"].setdefault(dtype_name, {}).update(schedules)
        # The file keeps its permissions (a package file others read); a new one is readable by all.
        mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o644
        replace_file(path, (json.dumps(current, indent=1, sort_keys=True) + "\n").encode("utf-8"), mode)
    _defaults = None

