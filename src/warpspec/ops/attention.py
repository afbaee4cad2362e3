"""``warpspec.ops.attention``: the attention forward pass softmax(scale · Q·Kᵀ) · V on the FlashAttention-3 style
kernel of ``warpspec.ops.attention_kernel`` (docs/attention.md), or for short sequences its persistent form
(``warpspec.ops.attention_persistent_kernel``, ``uses_persistent``).

numpy arrays run on the emulator directly; torch tensors go through the custom op ``warpspec::attention``
(``warpspec.torch_ops.custom_op``), which returns a new output and its log-sum-exp: CUDA tensors run on their GPU
and stream, CPU tensors on the emulator, and ``torch.compile(fullgraph=True)`` sees one opaque op. The op is
differentiable (``torch.library.register_autograd``; the backward is ``warpspec.ops.attention_backward``'s kernels,
fed the saved log-sum-exp). Every unsupported argument is an ``ArgumentError`` naming it, raised before anything
is allocated or launched.
"""

from __future__ import annotations

import importlib
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from warpspec import runtime
from warpspec.dtypes import DType, bfloat16, float16
from warpspec.errors import ArgumentError
from warpspec.ops.attention_decode import decode_lse_offset, decode_workspace, launch_decode, uses_decode
from warpspec.ops.attention_kernel import HEAD_DIMS, LOG2_E, Attention
from warpspec.ops.attention_persistent_kernel import AttentionPersistent, tile_walk
from warpspec.ops.frame import Signatures, bound_launcher, describe, plain_cuda, sm_count
from warpspec.ops.operands import dtype_of, same_device, same_kind
from warpspec.ops.workspace import stream_workspace
from warpspec.tune.cache import size_bucket

DTYPES = (float16, bfloat16)
#: The shipped schedule of each head dim. K/V tiles: S (block_n/2 registers per thread), P (block_n/4) and O
#: (D/2) must fit the consumers' registers, and every stage holds a K and a V tile of block_n x D:
#: D=256 takes 80-row tiles in 2 stages (64 KB of Q + 160 KB of K/V), D=128 128-row tiles in 2 stages (FA3's
#: 128 x 128 tile), D=64 128-row tiles in 2 (with three consumer warpgroups, ``FORWARD_CONSUMERS``: 1-3% faster
#: than 3 stages at seq 8192-16384 on an H100, equal at 4096).
DEFAULT_SCHEDULES = {
    64: {"block_n": 128, "num_stages": 2, "unroll": 1},
    128: {"block_n": 128, "num_stages": 2, "unroll": 1},
    256: {"block_n": 80, "num_stages": 2, "unroll": 1},
}
#: The one-tile kernel's consumer warpgroups (``Attention``'s ``consumers``) by (head dim, causal), 2 where not
#: listed: three make 192-row query tiles, two warpgroups' softmax hiding under the third's GEMMs, at 160 registers
#: a thread, which hold O, S and P of D 64 in 128-key tiles and of D 128 in tiles up to 80 keys
#: (``THREE_CONSUMER_SCHEDULES``). H100, docs/performance.md: at D 64 they took seq 4096 and 8192 from 0.88-1.00x
#: cuDNN to 0.90-1.16x (fp16 and bf16, causal or not), 1.07-1.16x at 16384 (run K4); at D 128 without a mask
#: 1.02-1.06x the two-warpgroup kernel at seq 4096-16384, and causal 0.98-1.02x (not taken; run L1).
FORWARD_CONSUMERS: dict[tuple[int, bool], int] = {(64, False): 3, (64, True): 3, (128, False): 3}
#: The schedule of a head dim's three-warpgroup kernel where it differs from ``DEFAULT_SCHEDULES``: D 128's
#: fragments fit 160 registers up to 80-key tiles (``attention_kernel.fragment_registers``); 80 keys in 2 stages
#: were faster than 64 in 2 or 3 (run L1).
THREE_CONSUMER_SCHEDULES = {128: {"block_n": 80, "num_stages": 2, "unroll": 1}}
#: Where ops.attention runs the persistent kernel (``attention_persistent_kernel``), by (head dim, causal): entries
#: (up to how many query rows, consumer warpgroups, schedule), the first whose bound S_q is within applies; past
#: the last, and at D 256, the one-tile kernel. At short rows a one-tile block spends much of its life in its
#: prologue and epilogue, and the persistent kernel was up to 1.21x the one-tile kernel (fifth session); causal,
#: with tiles dealt by its walk (``tile_walk``, sixteenth session, FlashAttention-3's grid, fp16, H100) it is also
#: ahead at longer rows: D 128 at 4096 and 8192 rows 1.03-1.05x the one-tile kernel (even at 16384), D 64 with
#: three warpgroups in 96-key tiles 1.08x at 8192 (1.01x at 16384), and the fastest schedules changed: 128-key
#: tiles up to 1024 rows at D 64 (1.08x the 64-key tiles shipped before) and at D 128 past 512 (1.05x at 1024),
#: three warpgroups at D 64 past 1024 rows (1.05x two at 2048). The bounds are size buckets' (``script_for``
#: remembers one choice per bucket). Without a mask: three warpgroups at D 64 (1.02-1.08x two, run L1).
PERSISTENT_ROWS: dict[tuple[int, bool], tuple[tuple[int, int, dict], ...]] = {
    (64, False): ((2048, 3, {"block_n": 128, "num_stages": 2}),),
    (64, True): ((1024, 2, {"block_n": 128, "num_stages": 2}), (8192, 3, {"block_n": 96, "num_stages": 2})),
    (128, False): ((2048, 2, {"block_n": 128, "num_stages": 2}),),
    (128, True): ((512, 2, {"block_n": 64, "num_stages": 3}), (8192, 2, {"block_n": 128, "num_stages": 2})),
}
MAX_GRID_Y = 65535  # the grid's y extent (one row of blocks per batch and head)
MAX_INT32 = 2**31 - 1
LN_2 = math.log(2.0)  # the kernels' log-sum-exp is in base 2; the API's in base e


@dataclass(frozen=True)
class Problem:
    """One validated call."""

    batch: int
    heads: int
    kv_heads: int
    seq_q: int
    seq_k: int
    head_dim: int
    dtype: DType
    causal: bool
    scale: float


def attention(q, k, v, *, causal=False, scale=None, return_lse=False):
    """Attention forward: ``softmax(scale · q @ kᵀ) @ v`` per batch and head, computed in float32 with an online
    softmax, returned in q's dtype and kind.

    * ``q`` [B, H, S_q, D], ``k`` and ``v`` [B, H_kv, S_k, D]: float16 or bfloat16 (one dtype), D in {64, 128,
      256}; any strides (an operand that is not contiguous, such as ``x.transpose(1, 2)`` of a [B, S, H, D] tensor
      or a slice of the sequence, is read from a contiguous copy: one more read and write of it); H a multiple of
      H_kv (grouped-query attention: query head h reads K/V head h // (H / H_kv)); any S_q >= 0 and S_k >= 1.
    * ``causal``: query i sees keys j <= i + S_k - S_q (aligned at the bottom right, as FlashAttention does; for
      S_q = S_k the usual lower triangle). A query row that sees no key (S_q > S_k) is 0.
    * ``scale``: the logits' factor, D ** -0.5 by default; any finite number, as torch's SDPA takes it (zero: every
      key a row sees equally likely).

    numpy arrays (ml_dtypes.bfloat16 for bfloat16) run on the emulator; torch tensors through the custom op
    ``warpspec::attention``: CUDA tensors on the GPU, CPU tensors on the emulator; torch tensors are
    differentiable (``out.backward()`` runs ``attention_backward``'s kernels).

    With ``return_lse``, returns ``(out, lse)``: ``lse`` float32 [B, H, S_q], each row's
    ``logsumexp(scale · q @ kᵀ)`` over the keys it sees (+inf for a row that sees none), as
    ``attention_backward`` takes it.
    """
    if not isinstance(return_lse, bool):
        raise ArgumentError(f"return_lse must be True or False, got {return_lse!r}")
    q, scale, _ = fold_scale_sign(q, scale)
    q, k, v = contiguous_copy(q), contiguous_copy(k), contiguous_copy(v)
    found = call_for(q, k, v, causal, scale)
    if found.kind == "torch":
        torch = sys.modules["torch"]
        # The op is registered by the first call even when that call takes a bound launch: a later call traced by
        # torch.compile must find it registered, since dynamo cannot trace a registration.
        op = _torch_op()
        # Traced by torch.compile: the op (an eager call's bound launch must not be traced into the graph).
        if torch.compiler.is_compiling():
            out, lse2 = op(q, k, v, found.problem.causal, found.problem.scale)
        elif torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            if plain_cuda(q, k, v) and _support().dispatcher_idle(q.get_device()):
                out, lse2 = _eager.apply(q, k, v, found)  # the op's autograd, without the op's dispatch
            else:
                out, lse2 = op(q, k, v, found.problem.causal, found.problem.scale)
        elif found.direct is not None and _support().dispatcher_idle(q.get_device()) and runtime.direct_launches():
            out, lse2 = found.direct(q, k, v)  # a call like an earlier one: its bound launch alone
        elif _support().dispatch_is_plain(q, k, v):
            # What the op would run, without the dispatcher's cost (decode at batch 1 is bound by host time).
            out, lse2 = _allocate_and_run(q, k, v, found)
        else:
            out, lse2 = op(q, k, v, found.problem.causal, found.problem.scale)
        return (out, lse2 * LN_2) if return_lse else out
    out = np.empty(q.shape, dtype=q.dtype)
    lse2 = np.empty(q.shape[:3], dtype=np.float32)
    with runtime.use_backend("emulator"):
        run(q, k, v, out, lse2, found.problem)
    return (out, lse2 * np.float32(LN_2)) if return_lse else out


def _support():
    """``warpspec.torch_ops`` (which imports torch, so it is imported at a call with torch tensors, not with this
    module; the lookup is cheaper per call than an import statement)."""
    return sys.modules.get("warpspec.torch_ops") or importlib.import_module("warpspec.torch_ops")


class Call:
    """What the first call of a description decided: the kind of its arrays, its validated problem and, once it
    launched on plain CUDA tensors, ``direct(q, k, v) -> (out, lse2)``, the launch later such calls take (a new
    output and log-sum-exp, the stream's workspace, the bound launch; inside CUDA-graph capture a decode launch
    takes ``run``, whose workspace is the graph's)."""

    __slots__ = ("kind", "problem", "direct", "held")

    def __init__(self, kind: str, problem: Problem):
        self.kind = kind
        self.problem = problem
        self.direct = None
        self.held = ()  # arrays ``direct`` launches read besides its operands (the persistent kernel's walk)

    def bind(self, out, launched: tuple | None) -> None:
        """Make ``direct`` from the first launch on plain CUDA tensors (``launched``: the Script and arguments
        ``run`` called)."""
        if launched is None:
            return
        found = bound_launcher(launched)
        if found is None:
            return
        bound, capturing, current_stream, empty = found
        torch = sys.modules["torch"]
        device, index, dtype, shape = out.device, out.device.index, out.dtype, tuple(out.shape)
        lse_shape, problem = shape[:3], self.problem
        if not uses_decode(problem):
            # The persistent kernel's walk (``persistent_walk``) is its sixth array, held by the call so that it
            # outlives its place among the kept walks.
            self.held = tuple(arg for arg in launched[1][11:] if hasattr(arg, "data_ptr"))
            walk = tuple(arg.data_ptr() for arg in self.held)

            def direct(q, k, v):
                out = empty(shape, dtype=dtype, device=device)
                lse2 = empty(lse_shape, dtype=torch.float32, device=device)
                bound(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse2.data_ptr(), *walk,
                      stream=current_stream(index))
                return out, lse2
        else:
            _, _, elements, flag_count = decode_workspace(problem)
            lse_offset = decode_lse_offset(problem)

            def direct(q, k, v):
                out = empty(shape, dtype=dtype, device=device)
                lse2 = empty(lse_shape, dtype=torch.float32, device=device)
                if capturing():
                    run(q, k, v, out, lse2, problem)
                    return out, lse2
                stream = current_stream(index)
                partials, flags = stream_workspace(device, stream, elements, flag_count)
                base = partials.data_ptr()
                bound(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse2.data_ptr(), base,
                      base + lse_offset, flags.data_ptr(), stream=stream)
                return out, lse2
        self.direct = direct


_calls = Signatures()  # the description of (q, k, v, causal, scale) -> its Call


def call_for(q, k, v, causal, scale) -> Call:
    """The ``Call`` of these arguments: made at the first call of their description (every check, an
    ``ArgumentError`` naming the argument), then looked up."""
    try:
        # The types are part of the key: True == 1 would otherwise let a bool scale (refused) find a float's call.
        key = (describe(q), describe(k), describe(v), causal, type(causal), scale, type(scale))
        found = _calls.get(key)
    except (TypeError, AttributeError):  # not arrays, unhashable arguments, symbolic sizes: checked afresh
        key = found = None
    if found is None:
        kind = same_kind("q", q, k=k, v=v)
        problem = validate(q, k, v, causal, scale)
        if kind == "torch":
            same_device("q", q, k=k, v=v)
        found = _calls.remember(key, Call(kind, problem))
    return found


def fold_scale_sign(q, scale):
    """``(q, scale, sign)`` with ``scale`` as the kernels take it. The kernels scale each row's maximum of the raw
    logits, which is the maximum of the scaled ones only for a positive scale; torch's SDPA takes any finite scale,
    so a negative one runs as ``-q`` with ``-scale`` and zero as ``0 · q`` with 1: the same logits exactly (a
    negation and a zero are exact), the same log-sum-exp, and, for torch tensors, autograd carries ``sign`` into
    q's gradient. ``sign`` is -1, 0, or 1 where ``q`` and ``scale`` pass through (a positive scale, None, or
    anything else, which the checks then refuse, or a q that is no array, which they name)."""
    if (isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale <= 0 or not math.isfinite(scale)
            or not (isinstance(q, np.ndarray) or hasattr(q, "requires_grad"))):
        return q, scale, 1
    sign = -1 if scale < 0 else 0
    return q * sign, (-float(scale) if sign else 1.0), sign


def contiguous_copy(value):
    """``value`` itself when it is contiguous or no array at all (the checks name what it is); else a contiguous
    copy (a slice such as ``q[:, :, -1:]``, a transposed [B, S, H, D] view, a broadcast one): the kernels read dense
    [batch · heads, seq, head_dim] rows with TMA. torch's copy is differentiable, so gradients reach the view."""
    if not isinstance(value, np.ndarray) and not hasattr(value, "is_contiguous") or _contiguous(value):
        return value
    return np.ascontiguousarray(value) if isinstance(value, np.ndarray) else value.contiguous()


def _contiguous(value) -> bool:
    if isinstance(value, np.ndarray):
        return value.flags.c_contiguous
    return value.is_contiguous()


def validate(q, k, v, causal, scale) -> Problem:
    """Every check of the arguments (an ``ArgumentError`` naming the argument); the validated problem."""
    for name, value in (("q", q), ("k", k), ("v", v)):
        if len(value.shape) != 4:
            raise ArgumentError(f"{name} must be 4-D [batch, heads, seq, head_dim], got shape {tuple(value.shape)}")
    batch, heads, seq_q, head_dim = (int(s) for s in q.shape)
    batch_k, kv_heads, seq_k, head_dim_k = (int(s) for s in k.shape)
    if tuple(v.shape) != tuple(k.shape):
        raise ArgumentError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if batch_k != batch:
        raise ArgumentError(f"k has batch {batch_k} but q has {batch}")
    if head_dim_k != head_dim:
        raise ArgumentError(f"k has head_dim {head_dim_k} but q has {head_dim}")
    if head_dim not in HEAD_DIMS:
        raise ArgumentError(f"head_dim (q.shape[3]) is {head_dim}; ops.attention supports "
                            f"{', '.join(map(str, HEAD_DIMS))}")
    if kv_heads < 1 or heads % kv_heads:
        raise ArgumentError(f"q has {heads} heads and k {kv_heads}: the query heads must be a multiple of the "
                            f"key/value heads (grouped-query attention)")
    if seq_k < 1:
        raise ArgumentError("k and v have no keys (seq = 0): attention needs at least one")
    dtype = dtype_of(q)
    if dtype not in DTYPES:
        raise ArgumentError(f"q has dtype {dtype.name if dtype else q.dtype}; ops.attention takes float16 or "
                            f"bfloat16")
    for name, value in (("k", k), ("v", v)):
        if dtype_of(value) != dtype:
            found = dtype_of(value)
            raise ArgumentError(f"{name} has dtype {found.name if found else value.dtype} but q has {dtype.name}: "
                                f"q, k and v must have one dtype")
    for name, value in (("q", q), ("k", k), ("v", v)):
        if not _contiguous(value):
            raise ArgumentError(f"{name} must be contiguous [batch, heads, seq, head_dim] (the kernel reads it as "
                                f"[batch * heads, seq, head_dim] with TMA); make a contiguous copy first")
    if batch * heads > MAX_GRID_Y:
        raise ArgumentError(f"batch * heads is {batch * heads}; at most {MAX_GRID_Y} (the grid's y extent)")
    # The kernels address rows with int32 coordinates (TMA's, and the workspaces' row indices); element offsets
    # are 64-bit, so a tensor of more than 2**31 elements is fine as long as its rows are not.
    for name, rows in (("q", batch * heads * seq_q), ("k and v", batch * kv_heads * seq_k)):
        if rows > MAX_INT32:
            raise ArgumentError(f"{name}: batch * heads * seq is {rows} rows of head_dim; the kernels' int32 row "
                                f"coordinates reach 2**31 - 1")
    if not isinstance(causal, bool):
        raise ArgumentError(f"causal must be True or False, got {causal!r}")
    if scale is None:
        scale = head_dim ** -0.5
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ArgumentError(f"scale must be a finite number (None: head_dim ** -0.5), got {scale!r}")
    elif scale <= 0:  # the entry points fold a non-positive scale's sign into q first (fold_scale_sign)
        raise ArgumentError(f"scale must be positive here, got {scale!r}: fold its sign into q first "
                            f"(fold_scale_sign)")
    return Problem(batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, causal, float(scale))


_tuned: dict = {}  # (dtype name, head_dim, causal, persistent, consumers) -> TunedScript over the schedule space
_chosen: dict = {}  # (dtype name, head_dim, causal, persistent, consumers, schedule or size buckets, back end,
#                     device) -> Script


def uses_persistent(problem: Problem) -> bool:
    """Whether ``problem`` runs the persistent kernel: ``PERSISTENT_ROWS`` has an entry for its rows."""
    return _persistent_entry(problem) is not None


def _persistent_entry(problem: Problem) -> tuple[int, int, dict] | None:
    """``PERSISTENT_ROWS``'s entry for ``problem``'s head dim, mask and rows: the first whose bound its rows are
    within; None past the last."""
    for entry in PERSISTENT_ROWS.get((problem.head_dim, problem.causal), ()):
        if problem.seq_q <= entry[0]:
            return entry
    return None


def _persistent_choice(problem: Problem) -> tuple[int, dict]:
    """(consumer warpgroups, schedule) of the persistent kernel on ``problem``: its ``PERSISTENT_ROWS`` entry; where
    ops.attention would not run it (a benchmark forcing it past the table's rows), the last entry of the head dim
    and mask, else two warpgroups at the one-tile kernel's tile and stages."""
    entry = _persistent_entry(problem)
    if entry is None:
        entries = PERSISTENT_ROWS.get((problem.head_dim, problem.causal))
        if not entries:
            one_tile = DEFAULT_SCHEDULES[problem.head_dim]
            return 2, {"block_n": one_tile["block_n"], "num_stages": one_tile["num_stages"]}
        entry = entries[-1]
    return entry[1], dict(entry[2])


def persistent_schedule(problem: Problem) -> dict:
    """The persistent kernel's shipped schedule for ``problem`` (``PERSISTENT_ROWS``; ``script_for`` remembers one
    choice per size bucket)."""
    return _persistent_choice(problem)[1]


def consumers_of(problem: Problem, persistent: bool) -> int:
    """The consumer warpgroups of the kernel that runs ``problem``: ``PERSISTENT_ROWS``'s for the persistent
    kernel, ``FORWARD_CONSUMERS`` for the one-tile kernel (2 where it lists nothing)."""
    if persistent:
        return _persistent_choice(problem)[0]
    return FORWARD_CONSUMERS.get((problem.head_dim, problem.causal), 2)


def default_schedule(problem: Problem, persistent: bool) -> dict:
    """The shipped schedule of the kernel that runs ``problem``: ``persistent_schedule`` for the persistent
    kernel; for the one-tile kernel the head dim's ``DEFAULT_SCHEDULES`` entry, or its
    ``THREE_CONSUMER_SCHEDULES`` entry where it runs three consumer warpgroups."""
    if persistent:
        return persistent_schedule(problem)
    if consumers_of(problem, persistent) == 3 and problem.head_dim in THREE_CONSUMER_SCHEDULES:
        return THREE_CONSUMER_SCHEDULES[problem.head_dim]
    return DEFAULT_SCHEDULES[problem.head_dim]


def tuned_script(problem: Problem, persistent: bool | None = None):
    """The autotuned kernel (every schedule whose fragments fit its consumers' registers) of the problem's dtype,
    head dim and causality: the persistent kernel where ``persistent`` (None: where ``uses_persistent``), else
    the one-tile kernel, each with ``consumers_of`` consumer warpgroups."""
    persistent = uses_persistent(problem) if persistent is None else persistent
    consumers = consumers_of(problem, persistent)
    key = (problem.dtype.name, problem.head_dim, problem.causal, persistent, consumers)
    if key not in _tuned:
        kernel = AttentionPersistent if persistent else Attention
        _tuned[key] = kernel(problem.dtype, head_dim=problem.head_dim, causal=problem.causal, consumers=consumers)
    return _tuned[key]


def script_for(problem: Problem, args: tuple, schedule: dict | None = None, persistent: bool | None = None):
    """The pinned Script that runs ``problem`` (called with kernel arguments ``args``, made by ``arguments`` with
    the same ``persistent``): the persistent kernel where ``persistent`` (None: where ``uses_persistent``), else
    the one-tile kernel; with ``schedule`` when given; else, on the GPU, the winner that ``tune_attention`` (or an
    autotuned call) stored for the problem's size buckets; else the shipped default. Remembered per kernel, size
    buckets, back end and device."""
    backend = runtime.get_backend()
    device = runtime.current_device() if backend == "cuda" else None
    sizes = (size_bucket(problem.seq_q), size_bucket(problem.seq_k), size_bucket(problem.batch * problem.heads))
    persistent = uses_persistent(problem) if persistent is None else persistent
    key = (problem.dtype.name, problem.head_dim, problem.causal, persistent, consumers_of(problem, persistent),
           tuple(sorted(schedule.items())) if schedule is not None else sizes, backend, device)
    script = _chosen.get(key)
    if script is None:
        if schedule is None and backend == "cuda":
            from warpspec.tune.tuner import stored_schedule

            schedule = stored_schedule(tuned_script(problem, persistent), args, {})
        if schedule is None:
            schedule = default_schedule(problem, persistent)
        script = _chosen[key] = tuned_script(problem, persistent).instantiate(dict(schedule))
    return script


def forget_choices() -> None:
    """Forget the schedules this process chose (after tuning, the next call of each shape looks again)."""
    _chosen.clear()


def arguments(q, k, v, out, lse2, problem: Problem, persistent: bool | None = None) -> tuple:
    """The kernel's call arguments: sizes, head counts, the scale in the exp2 domain, the five arrays (``lse2``
    float32 [B, H, S_q] receives the base-2 log-sum-exp of the scaled logits), and for the persistent kernel
    (``persistent``; None: where ``uses_persistent``) its walk of the tiles (``persistent_walk``) and its grid
    bound, the GPU's SMs."""
    group = problem.heads // problem.kv_heads
    args = (problem.seq_q, problem.seq_k, problem.batch * problem.heads, problem.heads, group,
            problem.scale * LOG2_E, q, k, v, out, lse2)
    persistent = uses_persistent(problem) if persistent is None else persistent
    return args + (persistent_walk(problem, q), sm_count()) if persistent else args


_walks: dict = {}  # (CUDA device index, tile_walk's arguments) -> the walk on that device
MAX_WALKS = 256  # walks kept on the GPUs (a few KB each); the oldest is dropped past this


def _walk_sizes(problem: Problem) -> tuple:
    """``tile_walk``'s arguments for ``problem`` on the persistent kernel: its sizes, query tile (64 rows per
    consumer warpgroup), mask and grid bound."""
    block_m = 64 * consumers_of(problem, persistent=True)
    return (problem.seq_q, problem.seq_k, problem.batch * problem.heads, block_m, problem.causal, sm_count())


def persistent_walk(problem: Problem, like):
    """The persistent kernel's walk of ``problem``'s tiles (``attention_persistent_kernel.tile_walk``) where
    ``like`` lives: the cached numpy table for numpy operands, a CPU tensor of it for CPU tensors (the emulator), a
    tensor on ``like``'s GPU made at the first call of these sizes there and kept for later calls, bound launches
    and CUDA graphs."""
    sizes = _walk_sizes(problem)
    table = tile_walk(*sizes)
    if isinstance(like, np.ndarray):
        return table
    torch = sys.modules["torch"]
    if like.device.type != "cuda":
        return torch.from_numpy(table.copy())
    key = (like.device.index, *sizes)
    found = _walks.get(key)
    if found is None:
        if len(_walks) >= MAX_WALKS:  # bound launches and graphs keep their own reference to the walk they took
            del _walks[next(iter(_walks))]
        found = _walks[key] = torch.from_numpy(table.copy()).to(like.device)
    return found


def walk_uploadable(problem: Problem, like) -> bool:
    """Whether ``persistent_walk`` can give the walk for ``like``: always, but inside CUDA-graph capture before
    these sizes ran eagerly on ``like``'s GPU, whose upload (a host-to-device copy) the capture cannot record."""
    if isinstance(like, np.ndarray) or like.device.type != "cuda":
        return True
    torch = sys.modules["torch"]
    return ((like.device.index, *_walk_sizes(problem)) in _walks
            or not torch.cuda.is_current_stream_capturing())


def run(q, k, v, out, lse2, problem: Problem) -> tuple | None:
    """Run ``problem`` on the kernel that suits it: the decode kernel for few query rows (decode and speculative
    decoding, ``warpspec.ops.attention_decode``), else the forward kernel. Returns the (Script, arguments) it
    called, None when there was nothing to do."""
    if problem.seq_q == 0 or problem.batch * problem.heads == 0:  # an empty output: no kernel, no size rule
        return None
    if uses_decode(problem):
        return launch_decode(q, k, v, out, lse2, problem)
    return launch(q, k, v, out, lse2, problem)


def launch(q, k, v, out, lse2, problem: Problem, schedule: dict | None = None,
           persistent: bool | None = None) -> tuple | None:
    """Run the forward kernel (the persistent one where ``persistent``; None: where ``uses_persistent``) on
    validated operands on the selected back end; returns the (Script, arguments) it called (None for S_q = 0:
    nothing to do)."""
    if problem.seq_q == 0 or problem.batch * problem.heads == 0:
        return None
    if persistent is None:
        # A first call of its sizes inside CUDA-graph capture takes the one-tile kernel: the persistent one's walk
        # would have to be uploaded, which the capture cannot record.
        persistent = uses_persistent(problem) and walk_uploadable(problem, q)
    args = arguments(q, k, v, out, lse2, problem, persistent)
    script = script_for(problem, args, schedule, persistent)
    script(*args)
    return script, args


def tune_attention(shapes, dtype="float16", *, causal=False, progress=None) -> dict:
    """Tune the kernel on the GPU for each ``(batch, heads, kv_heads, seq_q, seq_k, head_dim)`` of ``shapes``
    (random torch CUDA operands) and store the winners in the tuning cache, where later ``ops.attention`` calls of
    the same size buckets, in any process, find them. ``progress(line)`` (e.g. ``print``) hears about each shape.
    Returns ``{shape: winning schedule}``."""
    if dtype not in ("float16", "bfloat16"):
        raise ArgumentError(f"dtype must be 'float16' or 'bfloat16', got {dtype!r}")
    import torch

    torch_dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16}
    winners = {}
    with runtime.use_backend("cuda"):
        for shape in shapes:
            batch, heads, kv_heads, seq_q, seq_k, head_dim = shape
            started = time.perf_counter()
            q = torch.randn(batch, heads, seq_q, head_dim, device="cuda", dtype=torch_dtypes[dtype])
            k = torch.randn(batch, kv_heads, seq_k, head_dim, device="cuda", dtype=torch_dtypes[dtype])
            v = torch.randn_like(k)
            problem = validate(q, k, v, causal, None)
            tuned = tuned_script(problem)
            lse2 = torch.empty(q.shape[:3], device="cuda", dtype=torch.float32)
            tuned(*arguments(q, k, v, torch.empty_like(q), lse2, problem))
            torch.cuda.synchronize()
            winners[tuple(shape)] = dict(tuned.last_report.winner.schedule)
            forget_choices()  # calls made before this run chose without the new winner
            if progress is not None:
                progress(f"{dtype} {shape} causal={causal}: {tuned.last_report.summary()}; winner "
                         f"{tuned.last_report.winner.label}, {tuned.last_report.winner.time_ms:.3f} ms "
                         f"({time.perf_counter() - started:.1f} s)")
    return winners


# --------------------------------------------------------------------------------------------- torch op

_op = None
#: The ``torch.autograd.Function`` an eager differentiated call on plain CUDA tensors takes (made with the op).
_eager = None


def _torch_op():
    """The custom op ``warpspec::attention(q, k, v, causal, scale) -> (out, lse2)`` (``lse2`` the kernel's base-2
    log-sum-exp), differentiable through ``torch.library.register_autograd``: registered when this module is
    imported after torch, else at the first call with torch tensors (torch stays optional). Registering cannot be
    traced by ``torch.compile``: import torch before warpspec.ops, or call once eagerly, before compiling."""
    global _op, _eager
    if _op is None:
        import torch
        from torch.autograd.function import once_differentiable

        from warpspec.ops.attention_backward import torch_backward_op
        from warpspec.torch_ops import custom_op

        _op = custom_op("warpspec::attention", _op_implementation,
                        schema="(Tensor q, Tensor k, Tensor v, bool causal, float scale) -> (Tensor, Tensor)")
        torch_backward_op()  # registered with the forward: the gradients may take it

        def setup_context(ctx, inputs, output):
            q, k, v, causal, scale = inputs
            _save_for_backward(ctx, q, k, v, output, causal, scale)

        def backward(ctx, dout, _dlse):
            return (*_gradients(ctx, dout), None, None)

        torch.library.register_autograd("warpspec::attention", backward, setup_context=setup_context)

        class EagerAttention(torch.autograd.Function):
            """The op's autograd for an eager call on plain CUDA tensors that no torch mode, transform or
            profiler watches: the same kernels (the description's bound launch once it has one), saved tensors and
            gradients, without the dispatcher's passes through the custom op and its autograd wrapper (a training
            step's forward took 133 µs of host time through them on an H100 machine, 68 this way)."""

            @staticmethod
            def forward(ctx, q, k, v, found):
                out, lse2 = _allocate_and_run(q, k, v, found)  # the bound launch, or the launch that binds it
                _save_for_backward(ctx, q, k, v, (out, lse2), found.problem.causal, found.problem.scale)
                return out, lse2

            @staticmethod
            @once_differentiable
            def backward(ctx, dout, _dlse):
                return (*_gradients(ctx, dout), None)

        _eager = EagerAttention
    return _op


def _save_for_backward(ctx, q, k, v, output, causal, scale) -> None:
    """What the backward reads, saved on the autograd context (the op's or ``EagerAttention``'s)."""
    ctx.save_for_backward(q, k, v, *output)
    ctx.causal, ctx.scale = causal, scale
    ctx.mark_non_differentiable(output[1])  # the log-sum-exp is saved for the backward, not differentiated
    # No zeros made for the log-sum-exp's gradient, never read (a kernel launch a step otherwise); O's is always
    # given, as the node runs only when O is differentiated (the log-sum-exp is not differentiable).
    ctx.set_materialize_grads(False)


def _gradients(ctx, dout) -> tuple:
    """(dq, dk, dv) from the saved tensors and O's gradient: where the dispatcher would do nothing but call it (no
    double backward, no mode), the backward op's implementation itself (a training step's backward is otherwise
    bound by host time at short lengths), else the op. Where ``AUTOGRAD_ACCUMULATES`` says (D 64; D 128 from 4096
    keys) dQ is accumulated in float32 across the key blocks (its last bits may vary from run to run, as cuDNN's and
    FlashAttention's do) unless ``torch.use_deterministic_algorithms(True)`` is in force, PyTorch's switch; other
    head dims, and any under the switch, take the deterministic kernels."""
    backward = sys.modules["warpspec.ops.attention_backward"]  # imported with the op (_torch_op)
    q, k, v, out, lse2 = ctx.saved_tensors
    dout = dout.contiguous()
    run_backward = backward._op_implementation if _support().dispatch_is_plain(q, k, v, out, dout, lse2) \
        else backward.torch_backward_op()
    deterministic = (sys.modules["torch"].are_deterministic_algorithms_enabled()
                     or not backward.autograd_accumulates(q.shape[-1], k.shape[2]))
    return run_backward(q, k, v, out, dout, lse2, ctx.causal, ctx.scale, deterministic)


def _op_implementation(q, k, v, causal, scale):
    """The op's real and fake implementation: validate, allocate, then run the kernel (``_allocate_and_run``)."""
    return _allocate_and_run(q, k, v, call_for(q, k, v, causal, scale))


def _allocate_and_run(q, k, v, found: Call):
    """(out, lse2) of validated torch tensors: allocated on q's device, then computed (fake or meta tensors, while
    ``torch.compile`` traces, only describe the call: nothing runs). The first launch on plain CUDA tensors binds
    the description's ``Call.direct``, which later calls take (the op's implementation too, under autograd)."""
    if found.direct is not None and runtime.direct_launches():  # a description launched on plain CUDA tensors
        return found.direct(q, k, v)
    torch = sys.modules["torch"]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse2 = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    if not runtime.shape_only((q, k, v)):
        launched = run(q, k, v, out, lse2, found.problem)
        # Bound at an eager launch: one inside graph capture may have taken the one-tile kernel for want of the
        # persistent kernel's walk (``launch``), which the next eager call uploads.
        if found.direct is None and plain_cuda(q, k, v) and not torch.cuda.is_current_stream_capturing():
            found.bind(out, launched)
    return out, lse2

