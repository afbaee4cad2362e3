"""``warpspec.ops.grouped_matmul``: one GEMM per group of rows, as a mixture-of-experts layer calls its experts, in
``torch._grouped_mm``'s 2-D × 3-D convention.

The forward pass is one persistent launch of ``warpspec.ops.grouped_kernel.GroupedGemm`` over every group's tiles,
which reads the group ends from ``offs`` on the device: numpy arrays run it on the emulator, torch tensors through
the custom op ``warpspec::grouped_matmul`` (CUDA tensors on their GPU, CPU tensors on the emulator). Its schedule
is a tuning winner where one is stored (an autotuned ``GroupedGemm`` called on the kernel's arguments stores one),
else the size rule ``grouped_schedule``.

The host reads ``offs`` only where it is on the host already (a numpy array, a CPU tensor), to check it, and not
under ``torch.compile``: a CUDA ``offs`` is not waited for, and the kernel clamps each end into [previous end,
total_M], so offsets that were never checked can make groups empty but never reach outside ``a`` and the output.
The output rows past the last group are written as zeros by the kernel (uninitialised rows there would reach
whatever sums the output). Operands the kernel cannot read as they are take a slower path, not an error: a ``b`` in
neither layout, an ``a`` whose rows are not contiguous, a broadcast operand or a non-contiguous ``offs`` is copied
first; a pitch TMA cannot describe (K or N not a multiple of 8) or a base address off TMA's 16 bytes runs one
``ops.matmul`` per group, which stages it (and reads ``offs`` on the host: a CUDA ``offs`` waits for the device,
and such a call cannot be captured in a CUDA graph).

The op is differentiable: dA = dC · B[g]ᵀ is one grouped launch on B's other layout (``b.transpose(1, 2)``, no
copy), and dB[g] = A[g]ᵀ · dC[g] one ``ops.matmul`` per non-empty group (a GEMM whose inner dimension is the
group's rows).

``batched_matmul`` is ``ops.matmul``'s batched form (``a`` [B, M, K] @ ``b`` [B, K, N], no epilogue) as the same
launch over B groups of M rows, on ends made from the shapes, so neither its forward nor its backward reads them
from the device.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

import numpy as np

from warpspec import runtime
from warpspec.dtypes import DType, bfloat16, float16
from warpspec.errors import ArgumentError
from warpspec.ops.grouped_kernel import GroupedGemm, grouped_schedule, grouped_workspace
from warpspec.ops.frame import Signatures, address, describe, plain_cuda, sm_count
from warpspec.ops.matmul import (MAX_EXTENT, TMA_ALIGNMENT, _out_dtype, _overlap, _torch_dtype, matmul, span,
                                 strides_of)
from warpspec.ops.operands import dtype_of, kind_of, same_device, same_kind
from warpspec.ops.workspace import placeholders_like, stream_workspace, workspace_like


@dataclass(frozen=True)
class GroupedProblem:
    """One validated call: G groups of total_M rows in all, K, N, the dtypes and B's layout."""

    groups: int
    total: int
    k: int
    n: int
    in_dtype: DType
    out_dtype: DType
    b_k_major: bool
    #: Every group has total / groups rows (a batched product, whose ends the host made): the kernel computes each
    #: tile's group instead of reading the ends (``GroupedGemm``'s ``uniform``).
    uniform: bool = False


def grouped_matmul(a, b, offs, *, out_dtype=None):
    """``out[offs[g-1]:offs[g]] = a[offs[g-1]:offs[g]] @ b[g]`` for every group g (``offs[-1]`` = 0).

    * ``a`` [total_M, K]: the rows of all groups, sorted by group; rows from ``offs[G-1]`` on belong to no group
      and their output rows are 0.
    * ``b`` [G, K, N]: row-major, or the transposed view of [G, N, K] expert weights (``w.transpose(1, 2)``).
    * ``offs``: int32 [G], the cumulative row ends (non-decreasing, at most total_M; equal neighbours are empty
      groups), a numpy array or a tensor (a CPU tensor with CUDA operands is copied to their device). It is
      checked where it is on the host; a CUDA tensor's ends are clamped by the kernel (the module docstring).
    * ``out_dtype``: as ``ops.matmul``'s (the input dtype by default, float32 allowed). float16 and bfloat16.

    Returns a new [total_M, N] array/tensor; torch tensors that require a gradient give a differentiable one."""
    if kind_of(a, "a") == "numpy":
        problem = call_for(a, b, offs, out_dtype).problem
        out = np.empty((problem.total, problem.n), dtype=problem.out_dtype.numpy)
        with runtime.use_backend("emulator"):
            write(problem, a, b, np.ascontiguousarray(offs), out)
        return out
    torch = sys.modules["torch"]
    # Under torch.compile the graph holds no host read: the ends are the kernel's to clamp.
    compiling = torch.compiler.is_compiling()
    found = call_for(a, b, offs, out_dtype, values=not compiling)
    # torch_ops imports torch, so it is imported here, not with this module; the lookup is cheaper per call.
    support = sys.modules.get("warpspec.torch_ops") or importlib.import_module("warpspec.torch_ops")
    wants_grad = torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)
    if (found.direct is not None and not compiling and not wants_grad and support.dispatcher_idle(a.get_device())
            and runtime.direct_launches()):
        out = found.direct(a, b, offs)  # a call like an earlier one: its bound launch alone
        if out is not None:
            return out
    problem = found.problem
    given = offs
    offs = offs.to(a.device).contiguous()  # the kernel reads [G] contiguous ends on a's device
    if support.dispatch_is_plain(a, b, offs):  # the dispatcher would do nothing else: skip its cost
        out = torch.empty((problem.total, problem.n), dtype=_torch_dtype(problem.out_dtype), device=a.device)
        launcher = write(problem, a, b, offs, out)
        # Later calls of the description take the launch alone where it read the operands as they are.
        if (found.direct is None and launcher is not None and launcher.bound is not None and offs is given
                and readable(a) is a and readable(b, problem.b_k_major) is b):
            found.direct = _direct_call(launcher, out)
        return out
    return _torch_op()(a, b, offs, _torch_dtype(problem.out_dtype))


class GroupedCall:
    """What the first call of a description decided: its validated problem and, once the grouped kernel ran on
    its plain CUDA tensors (``offs`` on ``a``'s device) as they are, ``direct(a, b, offs)``, the launch later such
    calls take (``_direct_call``)."""

    __slots__ = ("problem", "direct")

    def __init__(self, problem: GroupedProblem):
        self.problem = problem
        self.direct = None


_calls = Signatures()  # what validation reads of a call's operands -> its GroupedCall


def call_for(a, b, offs, out_dtype, values: bool = True) -> GroupedCall:
    """The ``GroupedCall`` of these arguments, after the checks of a call (``ArgumentError`` naming the argument)
    before anything is allocated: those that depend on the operands' description made at its first call, then
    looked up; with ``values``, the values of an ``offs`` on the host, every call."""
    try:
        key = (describe(a), describe(b), describe(offs), out_dtype)
        found = _calls.get(key)
    except (TypeError, AttributeError):  # not arrays, or an unhashable out_dtype: the checks say what is wrong
        key = found = None
    if found is None:
        found = _calls.remember(key, GroupedCall(_validate(a, b, offs, out_dtype)))
    if values and (isinstance(offs, np.ndarray) or offs.device.type == "cpu"):
        ends = [int(end) for end in offs.tolist()]
        total = found.problem.total
        if any(later < earlier for earlier, later in zip([0] + ends, ends)) or (ends and ends[-1] > total):
            raise ArgumentError(f"offs must be non-decreasing from 0 to at most total_M = {total}, got {ends}")
    return found


def _validate(a, b, offs, out_dtype) -> GroupedProblem:
    """The checks that depend on the operands' description alone."""
    kind = same_kind("a", a, b=b, offs=offs)
    if kind == "torch":
        same_device("a", a, b=b)
    if len(a.shape) != 2:
        raise ArgumentError(f"a must be 2-D [total_M, K], got shape {tuple(a.shape)}")
    if len(b.shape) != 3:
        raise ArgumentError(f"b must be 3-D [G, K, N], got shape {tuple(b.shape)}")
    groups, k, n = (int(s) for s in b.shape)
    if int(a.shape[1]) != k:
        raise ArgumentError(f"b has K = {k} (b.shape[1]) but a has {a.shape[1]} columns")
    in_dtype = dtype_of(a)
    if in_dtype not in (float16, bfloat16):
        raise ArgumentError(f"a must be float16 or bfloat16, got {getattr(in_dtype, 'name', a.dtype)}")
    if dtype_of(b) != in_dtype:
        raise ArgumentError(f"b must have a's dtype {in_dtype.name}, got {getattr(dtype_of(b), 'name', b.dtype)}")
    resolved = _out_dtype(in_dtype, None, out_dtype)
    if tuple(offs.shape) != (groups,) or str(offs.dtype).rpartition(".")[2] != "int32":
        raise ArgumentError(f"offs must be int32 of shape ({groups},) (one cumulative row end per group), got "
                            f"{offs.dtype} of shape {tuple(offs.shape)}")
    for name, value in (("a", a), ("b", b)):
        if any(stride < 0 for stride in strides_of(value)):
            raise ArgumentError(f"{name} has strides {strides_of(value)}: a negative stride (a reversed view such as "
                                f"x[::-1]) cannot be read by TMA; pass a copy (np.ascontiguousarray(x), "
                                f"x.contiguous())")
    total = int(a.shape[0])
    if max(total, k, n, groups) > MAX_EXTENT:
        raise ArgumentError(f"a or b has an extent above {MAX_EXTENT}, which the kernel's int32 sizes cannot hold")
    return GroupedProblem(groups, total, k, n, in_dtype, resolved, _k_major(b))


def _k_major(b) -> bool:
    """Whether ``b`` [G, K, N] is the transposed view of [G, N, K] expert weights (its K axis contiguous)."""
    strides = strides_of(b)
    return strides[1] == 1 and strides[2] != 1


def write(problem: GroupedProblem, a, b, offs, out) -> _Launcher | None:
    """Write every row of ``out`` on the selected back end: the grouped kernel on operands it can read (returns
    the ``_Launcher`` that launched it), else one ``ops.matmul`` per group (returns None)."""
    if 0 in (problem.total, problem.n):
        return None
    if problem.k == 0 or problem.groups == 0:  # no products: every row is 0
        out[...] = 0
        return None
    a, b = readable(a), readable(b, problem.b_k_major)
    launcher = _launcher(problem, a, b, offs, out)
    if launcher is None or any(address(x) % TMA_ALIGNMENT for x in (a, b, out)):
        out[...] = 0
        _per_group(problem, a, b, offs, out)
        return None
    launcher.launch(a, b, offs, out)
    return launcher


class _Launcher:
    """How calls of one description launch: the pinned Script and its workspace's sizes, and once it launched with
    plain CUDA tensors its bound launch (``runtime.pointer_launcher``), which later such calls take with their
    addresses alone."""

    def __init__(self, problem: GroupedProblem, script):
        self.problem = problem
        self.script = script
        self.workspace = grouped_workspace(sm_count(), script.schedule())  # (partials, flags), or (0, 0)
        self.bound = None

    def launch(self, a, b, offs, out) -> None:
        """Launch on these operands (of the description), bound where it can: not inside CUDA graph capture when
        the schedule may split tiles, whose workspace is then the graph's (``warpspec.ops.workspace``)."""
        elements, flag_count = self.workspace
        if self.bound is not None and runtime.direct_launches():
            torch = sys.modules["torch"]
            if not (elements and torch.cuda.is_current_stream_capturing()):
                stream = torch._C._cuda_getCurrentRawStream(out.device.index)
                partials, flags = (stream_workspace(out.device, stream, elements, flag_count) if elements
                                   else placeholders_like(out))
                self.bound(offs.data_ptr(), a.data_ptr(), b.data_ptr(), out.data_ptr(), partials.data_ptr(),
                           flags.data_ptr(), stream=stream)
                return
        work = workspace_like(out, elements, flag_count) if elements else placeholders_like(out)
        args = kernel_arguments(self.problem, a, b, offs, out, work)
        self.script(*args)
        if self.bound is None and plain_cuda(a, b, offs, out):
            self.bound = runtime.pointer_launcher(self.script, args)


def _direct_call(launcher: _Launcher, out):
    """The launch of later eager calls of the description ``out`` was made for: ``call(a, b, offs)`` allocates the
    output and launches (``_Launcher.launch``, bound); it returns None, launching nothing, where ``a`` or ``b``
    starts off TMA's 16 bytes (the per-group path's: the op's full path runs it)."""
    empty = sys.modules["torch"].empty
    device, dtype, shape = out.device, out.dtype, tuple(out.shape)

    def call(a, b, offs):
        if (a.data_ptr() | b.data_ptr()) % TMA_ALIGNMENT:
            return None
        out = empty(shape, dtype=dtype, device=device)
        launcher.launch(a, b, offs, out)
        return out

    return call


_MISSING = object()
_launchers = Signatures()  # (problem, pitches, back end, device) -> its _Launcher, or None for the per-group path


def _launcher(problem: GroupedProblem, a, b, offs, out) -> _Launcher | None:
    """The ``_Launcher`` of calls with these sizes and pitches on the selected back end and device, made at the
    first one; None where a pitch sends them to the per-group path."""
    backend = runtime.get_backend()
    a_strides, b_strides, out_strides = strides_of(a), strides_of(b), strides_of(out)
    key = (problem, a_strides, b_strides, out_strides, backend, runtime.current_device() if backend == "cuda" else None)
    found = _launchers.get(key, _MISSING)
    if found is _MISSING:
        found = None
        if _tma_pitches(problem, a_strides[0], b_strides, out_strides[0]):
            found = _Launcher(problem, script_for(problem, kernel_arguments(problem, a, b, offs, out,
                                                                            placeholders_like(out))))
        _launchers.remember(key, found)
    return found


def kernel_arguments(problem: GroupedProblem, a, b, offs, out, workspace: tuple) -> tuple:
    """The grouped kernel's call arguments on operands it can read as they are (``readable``, TMA's pitches): the
    sizes, the pitches, the arrays (``b`` as stored: [G, N, K] expert weights or [G, K, N]), the ``workspace``
    (partials, flags) and the SM count."""
    stored = b.swapaxes(1, 2) if problem.b_k_major else b
    group_pitch, pitch, _ = strides_of(stored)
    return (problem.groups, problem.total, problem.n, problem.k, strides_of(a)[0], pitch, group_pitch,
            strides_of(out)[0], offs, span(a), span(stored), span(out), *workspace, sm_count())


def readable(value, k_major: bool = False):
    """``value`` when its last axis (or, for ``b``, one of its last two) is contiguous, else a contiguous copy; a
    broadcast one (a stride of 0 over more than one element, which no TMA pitch describes) is copied too. A
    ``k_major`` ``b`` is copied as the [G, N, K] weights it views, so that it keeps the layout its problem says."""
    strides = strides_of(value)
    broadcast = any(stride == 0 and extent > 1 for stride, extent in zip(strides, value.shape))
    if not broadcast and (strides[-1] == 1 or (len(strides) == 3 and strides[1] == 1)):
        return value
    stored = value.swapaxes(1, 2) if k_major else value
    copy = np.ascontiguousarray(stored) if isinstance(stored, np.ndarray) else stored.contiguous()
    return copy.swapaxes(1, 2) if k_major else copy


def _tma_pitches(problem: GroupedProblem, a_pitch: int, b_strides: tuple[int, ...], out_pitch: int) -> bool:
    """Whether every pitch the kernel's views step by (``a``'s and ``out``'s row pitches, ``b``'s strides, all in
    elements) is a multiple of TMA's 16 bytes."""
    size = problem.in_dtype.nbytes
    pitches = [a_pitch * size, b_strides[0] * size, (b_strides[2] if problem.b_k_major else b_strides[1]) * size,
               out_pitch * problem.out_dtype.nbytes]
    return all(p % TMA_ALIGNMENT == 0 for p in pitches)


def _per_group(problem: GroupedProblem, a, b, offs, out) -> None:
    """The slow path: one ``ops.matmul`` per non-empty group, each staging what TMA cannot read."""
    start = 0
    for group, end in enumerate(_clamped(offs.tolist(), problem.total)):
        if end > start:
            out[start:end] = matmul(a[start:end], b[group], out_dtype=problem.out_dtype)
        start = end


_tuned: dict = {}  # (dtypes, B layout) -> the autotuned Script


def script_for(problem: GroupedProblem, args: tuple):
    """The pinned Script for ``problem``: a stored tuning winner on the GPU, else the size rule's schedule."""
    key = (problem.in_dtype.name, problem.out_dtype.name, problem.b_k_major, problem.uniform)
    tuned = _tuned.get(key)
    if tuned is None:
        tuned = _tuned[key] = GroupedGemm(problem.in_dtype, problem.out_dtype, problem.b_k_major,
                                          uniform=problem.uniform)
    schedule = None
    if runtime.get_backend() == "cuda":
        from warpspec.tune.tuner import stored_schedule

        schedule = stored_schedule(tuned, args, {})
    if schedule is None:
        schedule = grouped_schedule(problem.total, problem.groups, problem.n, problem.out_dtype, sm_count())
    return tuned.instantiate(schedule)


# --------------------------------------------------------------------------------------------- batched


@dataclass
class _Batch:
    """A batched description the grouped kernel runs as it is: B groups of M rows each, their problem and, once a
    call launched with plain CUDA tensors (on the description's device), its ``_Launcher``, which later such calls
    take without ``write``'s checks (the description's made them)."""

    batches: int
    rows: int
    problem: GroupedProblem
    launcher: _Launcher | None = None


_batches = Signatures()  # what a batched call's description is -> its _Batch, or None for the caller's loop
_offsets = Signatures()  # (B, M, device, stream; None for numpy) -> the ends [M, 2M, ..., B·M] there
#: id(offsets) -> (offsets, their ends as Python ints): what the backward of a batched call knows without reading
#: the device. The offsets are kept alive with their ends, so an id here is never one of another tensor.
_known_ends = Signatures()


def batched_matmul(a, b, out, out_dtype):
    """``a`` [B, M, K] @ ``b`` [B, K, N] (``ops.matmul``'s batched form without an epilogue) in one launch of the
    grouped kernel: B groups of M rows, ``a`` read as its [B·M, K] rows (a view), the ends [M, 2M, ..., B·M] made
    from the shapes (never read back: no host synchronisation) and kept per (B, M, device), the result's rows
    [B·M, N] viewed as [B, M, N]; ``out`` [B, M, N], when given, written through its rows.

    Returns None where the one launch does not apply, and the caller runs its loop of one GEMM per batch, which
    gives that call's result or error: operands the grouped kernel does not read as they are (dtypes other than
    float16 and bfloat16, an ``a`` whose rows do not flatten into one pitch, a ``b`` with no contiguous axis or
    broadcast over the batch, a negative stride, a pitch TMA cannot describe, an empty M, N or K), an ``out`` that
    does not flatten or shares memory with an input, misaligned CUDA addresses, a gradient with ``out=`` (which has
    none), fake or meta tensors and ``torch.compile`` (whose traced loop differentiates as it is)."""
    try:
        key = (describe(a), describe(b), describe(out), out_dtype)
        batch = _batches.get(key, _MISSING)
    except (TypeError, AttributeError):  # an out that is no array, or an unhashable out_dtype: the loop says so
        return None
    if batch is _MISSING:
        batch = _batches.remember(key, _batch_of(a, b, out, out_dtype))
    if batch is None or (out is not None and (_overlap(out, a) or _overlap(out, b))):
        return None
    problem = batch.problem
    shape = (batch.batches, batch.rows, problem.n)
    if isinstance(a, np.ndarray):
        result = np.empty(shape, problem.out_dtype.numpy) if out is None else out
        with runtime.use_backend("emulator"):
            write(problem, a.reshape(problem.total, problem.k), b, _batch_offsets(batch, None),
                  result.reshape(problem.total, problem.n))
        return result
    torch = sys.modules["torch"]
    if torch.compiler.is_compiling():
        return None
    if out is not None and torch.is_grad_enabled() and (a.requires_grad or b.requires_grad or out.requires_grad):
        return None
    # torch_ops imports torch, so it is imported here, not with this module; the lookup is cheaper per call.
    support = sys.modules.get("warpspec.torch_ops") or importlib.import_module("warpspec.torch_ops")
    plain = support.dispatch_is_plain(a, b, out)
    if plain and (address(a) | address(b) | (0 if out is None else address(out))) % TMA_ALIGNMENT:
        return None  # the grouped op's own fallback would read the ends on the host
    if not plain and runtime.shape_only((a, b)):  # a trace (fake or meta tensors): no ends to make or keep
        return None
    offs = _batch_offsets(batch, a.device)
    a_rows = a.view(problem.total, problem.k)
    if not plain:  # through the op: modes, the profiler and autograd see it
        result = _torch_op()(a_rows, b, offs, _torch_dtype(problem.out_dtype)).view(shape)
        return result if out is None else out.copy_(result)
    result = torch.empty(shape, dtype=_torch_dtype(problem.out_dtype), device=a.device) if out is None else out
    if problem.total:  # B = 0 has nothing to launch
        rows = result.view(problem.total, problem.n)
        if batch.launcher is None:
            batch.launcher = _launcher(problem, a_rows, b, offs, rows)
        batch.launcher.launch(a_rows, b, offs, rows)
    if out is not None:  # as an in-place op's: autograd refuses a backward through the values overwritten
        torch.autograd.graph.increment_version(out)
    return result


def _batch_of(a, b, out, out_dtype) -> _Batch | None:
    """The ``_Batch`` of a batched description (``a`` [B, M, K], ``b`` [B, K', N] and ``out`` [B, M, N] or None,
    the ranks, B and out's shape checked by ``ops.matmul``), or None where the grouped kernel does not read its
    operands as they are (``batched_matmul``). An ``out_dtype`` or ``out`` dtype ``ops.matmul`` does not take is
    its ``ArgumentError``, with its message."""
    batches, m, k = (int(s) for s in a.shape)
    _, k_b, n = (int(s) for s in b.shape)
    in_dtype = dtype_of(a)
    if (k_b != k or 0 in (m, n, k) or batches * m > MAX_EXTENT or in_dtype not in (float16, bfloat16)
            or dtype_of(b) != in_dtype):
        return None
    operands = (a, b) if out is None else (a, b, out)
    if out is not None and (isinstance(out, np.ndarray) != isinstance(a, np.ndarray)
                            or (isinstance(out, np.ndarray) and not out.flags.writeable)):
        return None
    if not isinstance(a, np.ndarray) and any(x.device != a.device for x in operands):
        return None

    def flattens(value) -> bool:  # [B, M, C] -> [B·M, C] as a view of unit column stride
        batch_stride, row_stride, column_stride = strides_of(value)
        return column_stride == 1 and row_stride > 0 and (batches <= 1 or batch_stride == m * row_stride)

    # No batches: nothing is read or written, whatever the strides (numpy gives an empty array strides of 0).
    if batches and (any(stride < 0 for x in operands for stride in strides_of(x)) or readable(b) is not b
                    or not flattens(a) or (out is not None and not flattens(out))):
        return None
    problem = GroupedProblem(batches, batches * m, k, n, in_dtype, _out_dtype(in_dtype, out, out_dtype), _k_major(b),
                             uniform=True)
    out_pitch = n if out is None else strides_of(out)[1]
    if batches and not _tma_pitches(problem, strides_of(a)[1], strides_of(b), out_pitch):
        return None
    return _Batch(batches, m, problem)


def _batch_offsets(batch: _Batch, device):
    """The int32 ends [M, 2M, ..., B·M] of ``batch``'s groups on ``device`` (None: a numpy array), made at the
    first call of (B, M, device) and kept; on a GPU per stream too, made on the stream that reads them, so that no
    launch reads them before they are written. Inside CUDA graph capture they are made by a node of the graph and
    not kept: their memory is the graph's."""
    torch = sys.modules.get("torch")
    stream = torch._C._cuda_getCurrentRawStream(device.index) if device is not None and device.type == "cuda" else None
    key = (batch.batches, batch.rows, device, stream)
    offs = _offsets.get(key)
    if offs is None:
        stop = (batch.batches + 1) * batch.rows
        if device is None:
            offs = np.arange(batch.rows, stop, batch.rows, dtype=np.int32)
        else:
            offs = torch.arange(batch.rows, stop, batch.rows, dtype=torch.int32, device=device)
            if stream is not None and torch.cuda.is_current_stream_capturing():
                return offs
            _known_ends.remember(id(offs), (offs, list(range(batch.rows, stop, batch.rows))))
        _offsets.remember(key, offs)
    return offs


# --------------------------------------------------------------------------------------------- torch op

_op = None


def _torch_op():
    """The custom op ``warpspec::grouped_matmul(a, b, offs, out_dtype) -> Tensor``, differentiable. Registered at
    the first use, or when this module is imported after torch."""
    global _op
    if _op is None:
        import torch

        from warpspec.torch_ops import custom_op

        _op = custom_op("warpspec::grouped_matmul", _op_implementation,
                        schema="(Tensor a, Tensor b, Tensor offs, ScalarType out_dtype) -> Tensor")

        def setup_context(ctx, inputs, output):
            a, b, offs, _ = inputs
            ctx.save_for_backward(a, b, offs)
            known = _known_ends.get(id(offs))
            ctx.ends = known[1] if known is not None and known[0] is offs else None  # a batched call's

        def backward(ctx, grad):
            a, b, offs = ctx.saved_tensors
            need_a, need_b = ctx.needs_input_grad[:2]
            # The kernels multiply 16-bit operands (a float32 gradient is rounded first) read with TMA pitches (an
            # expanded gradient, of c.sum() for one, is materialised).
            grad = grad.to(a.dtype).contiguous()
            grad_a = _torch_op()(grad, b.transpose(1, 2), offs, a.dtype) if need_a else None
            grad_b = None
            if need_b:  # one GEMM per group, on the ends of a batched call or read (a CUDA offs waits for the device)
                grad_b = torch.zeros_like(b)
                start = 0
                ends = ctx.ends if ctx.ends is not None else _clamped(offs.tolist(), int(a.shape[0]))
                for group, end in enumerate(ends):
                    if end > start:
                        grad_b[group] = matmul(a[start:end].T, grad[start:end])
                    start = end
            return grad_a, grad_b, None, None

        torch.library.register_autograd("warpspec::grouped_matmul", backward, setup_context=setup_context)
    return _op


def _clamped(ends: list[int], total: int) -> list[int]:
    """The group ends as the kernel takes them: each clamped into [previous end, ``total``]."""
    clamped, start = [], 0
    for end in ends:
        start = min(max(int(end), start), total)
        clamped.append(start)
    return clamped


def _op_implementation(a, b, offs, out_dtype):
    """The op's real and fake implementation: a new output, then the launch (nothing runs on fake or meta
    tensors). The caller validated the arguments."""
    import torch

    out = torch.empty((a.shape[0], b.shape[2]), dtype=out_dtype, device=a.device)
    if not runtime.shape_only((a, b, offs)):
        in_dtype, resolved = dtype_of(a), dtype_of(out)
        assert in_dtype is not None and resolved is not None
        known = _known_ends.get(id(offs))  # the ends a batched call made: equal groups
        problem = GroupedProblem(int(b.shape[0]), int(a.shape[0]), int(b.shape[1]), int(b.shape[2]), in_dtype,
                                 resolved, _k_major(b), uniform=known is not None and known[0] is offs)
        write(problem, a, b, offs, out)
    return out

