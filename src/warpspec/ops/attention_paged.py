"""``warpspec.ops.attention_paged``: attention of the newest query tokens of each sequence against a paged KV cache
(vLLM's layout): the keys of sequence b are the first ``seq_lens[b]`` rows of its pages ``block_table[b, :]``.

One launch covers the batch: for few query rows (S_q <= 16: decode, speculative decoding) the split-KV decode
kernel (``warpspec.ops.attention_decode_kernel.DecodePaged``: the query heads of a K/V head packed in one block,
each sequence's keys split over enough blocks to fill the GPU), otherwise the paged kernel
(``warpspec.ops.attention_paged_kernel``); in both the producer warp reads each key tile's page from
``block_table`` and loads it with TMA. numpy arrays run it on the emulator, torch tensors
through the custom op ``warpspec::attention_paged`` (CUDA tensors on their GPU, CPU tensors on the emulator). A q
that requires a gradient takes the differentiable path instead: each sequence's pages gathered by indexing the
cache, then ``ops.attention`` on them (one launch per sequence).
"""

from __future__ import annotations

import importlib
import math
import sys

import numpy as np

from warpspec import runtime
from warpspec.errors import ArgumentError
from warpspec.frontend.interpreter import cdiv
from warpspec.ops.attention import (DEFAULT_SCHEDULES, MAX_GRID_Y, MAX_INT32, Problem, _contiguous, attention,
                                    contiguous_copy, fold_scale_sign, validate)
from warpspec.ops.attention_decode import launch_decode_paged, uses_paged_decode
from warpspec.ops.attention_kernel import LOG2_E
from warpspec.ops.attention_paged_kernel import AttentionPaged
from warpspec.ops.attention_varlen import heads_first
from warpspec.ops.frame import Signatures, bound_launcher, describe
from warpspec.ops.operands import dtype_of, same_device, same_kind
from warpspec.ops.workspace import stream_workspace

PAGE_SIZES = (16, 256)  # the smallest and largest page size taken
#: Key tiles lie inside one page and hold a multiple of 16 rows (PV's WGMMA K step).
PAGE_MULTIPLE = 16


def attention_paged(q, k_cache, v_cache, block_table, seq_lens, *, causal=True, scale=None, check=True):
    """Attention for ``q`` [B, S_q, H, D] (the newest S_q tokens of each sequence: decode or chunked prefill; any
    strides: a q that is not contiguous is read from a contiguous copy) against ``k_cache`` and ``v_cache``
    [num_pages, page_size, H_kv, D] (page_size 16-256, contiguous), ``block_table`` int32
    [B, max_pages] (sequence b's pages, in order) and ``seq_lens`` int32 [B] (its keys, the new tokens included).
    ``causal`` aligns at the bottom right: query i of sequence b sees keys j <= i + seq_lens[b] - S_q. Returns
    [B, S_q, H, D] in q's dtype and kind. Every check is an ``ArgumentError`` naming the argument, before anything
    is allocated.

    ``check`` (default True) reads the table's and the lengths' values on the host and checks them: for CUDA
    tensors that is a copy to the host, which waits for the GPU's queued work, and it cannot happen inside CUDA
    graph capture (refused there, naming ``check=False``). ``check=False`` reads nothing back: no synchronisation,
    capturable, what a serving loop's decode step wants. The kernels stay inside the caches and the table
    whatever the values: a length is clamped to [0, max_pages * page_size] and a page index outside [0,
    num_pages) reads as a page of zeros, so unchecked bad values give a defined, wrong result, never a fault.
    A q that requires a gradient reads the values anyway (its path gathers each sequence's pages) and checks
    them."""
    if not isinstance(check, bool):
        raise ArgumentError(f"check must be True or False, got {check!r}")
    q, scale, _ = fold_scale_sign(q, scale)
    q = contiguous_copy(q)  # any strides (a slice of a projection): the caches, too large to copy, may not
    found = call_for(q, k_cache, v_cache, block_table, seq_lens, causal, scale)
    row = found.row
    if int(q.shape[0]) == 0:  # an empty batch: nothing to read or check (q · 0 keeps autograd's graph)
        return q * 0
    if found.kind == "numpy" or not q.requires_grad:
        if check:
            if found.kind == "torch" and q.is_cuda and sys.modules["torch"].cuda.is_current_stream_capturing():
                raise ArgumentError("attention_paged cannot read block_table's and seq_lens's values inside CUDA "
                                    "graph capture (they are checked on the host); pass check=False")
            if found.kind == "torch" and sys.modules["torch"].compiler.is_compiling():
                # Traced by torch.compile: the values exist only when the graph runs, so the check runs eagerly
                # there (a graph break), never traced.
                sys.modules["torch"].compiler.disable(check_contents)(found, block_table, seq_lens)
            else:
                check_contents(found, block_table, seq_lens)
        if found.seq_q == 0:
            return q * 0
        if found.kind == "torch":
            torch = sys.modules["torch"]
            op = _torch_op()  # registered by the first call: a later one traced by torch.compile must find it
            if not torch.compiler.is_compiling():
                if found.direct is not None and _support().dispatcher_idle(q.get_device()) \
                        and runtime.direct_launches():
                    return found.direct(q, k_cache, v_cache, block_table, seq_lens)  # its bound launch alone
                if _support().dispatch_is_plain(q, k_cache, v_cache, block_table, seq_lens):
                    # What the op would run, without the dispatcher's cost (a decode step is short).
                    return _allocate_and_run(q, k_cache, v_cache, block_table, seq_lens, found)
            return op(q, k_cache, v_cache, block_table, seq_lens, row.causal, row.scale)
        out = np.empty(q.shape, dtype=q.dtype)
        with runtime.use_backend("emulator"):
            launch(q, k_cache, v_cache, block_table, seq_lens, out, row.causal, row.scale)
        return out
    pages, lengths = check_contents(found, block_table, seq_lens)
    page_size = found.page_size
    outputs = []
    for b, (table_row, length) in enumerate(zip(pages.tolist(), lengths.tolist())):
        index = table_row[:cdiv(length, page_size)]
        if found.kind == "torch":
            index = sys.modules["torch"].tensor(index, dtype=sys.modules["torch"].long, device=k_cache.device)
        keys = k_cache[index].reshape(-1, *k_cache.shape[2:])[:length]
        values = v_cache[index].reshape(-1, *v_cache.shape[2:])[:length]
        out = attention(heads_first(q[b]), heads_first(keys), heads_first(values), causal=causal, scale=scale)[0]
        outputs.append(out.transpose(1, 0, 2) if found.kind == "numpy" else out.transpose(0, 1))
    if found.kind == "torch":
        return sys.modules["torch"].stack(outputs)
    return np.stack(outputs)


def _support():
    """``warpspec.torch_ops`` (imported at the first call with torch tensors; a lookup is cheaper per call than an
    import statement)."""
    return sys.modules.get("warpspec.torch_ops") or importlib.import_module("warpspec.torch_ops")


class PagedCall:
    """What the first call of a description (the arrays' kinds, dtypes, shapes, strides and devices, ``causal``,
    ``scale``) decided: every check that does not read the table's or the lengths' values, and ops.attention's
    problem of one token (``row``: dtype, heads, head dim, causal, scale)."""

    __slots__ = ("kind", "row", "seq_q", "num_pages", "page_size", "direct")

    def __init__(self, kind: str, row: Problem, seq_q: int, num_pages: int, page_size: int):
        self.kind = kind
        self.row = row
        self.seq_q = seq_q
        self.num_pages = num_pages
        self.page_size = page_size
        #: Once a decode launch (S_q <= 16) ran on plain CUDA tensors: ``direct(q, k_cache, v_cache, block_table,
        #: seq_lens) -> out``, the launch later calls of the description take (a new output, the stream's
        #: workspace, the bound launch; inside CUDA-graph capture the general launch, whose workspace is the
        #: graph's).
        self.direct = None

    def bind(self, out, launched) -> None:
        """Make ``direct`` from the first decode launch on plain CUDA tensors (``launched``: (Script, arguments)
        of ``launch_decode_paged``, whose q and out are the call's own at S_q = 1, and above it head-major copies,
        [B, H, S_q, D], which ``direct`` makes the same way)."""
        found = bound_launcher(launched)
        if found is None:
            return
        bound, capturing, current_stream, empty = found
        float32 = sys.modules["torch"].float32
        device, index, dtype, shape, row = out.device, out.device.index, out.dtype, tuple(out.shape), self.row
        batch, seq_q, heads, head_dim = shape
        heads_shape = (batch, heads, seq_q, head_dim)
        ws_o, ws_lse, ws_flags = launched[1][-3:]  # the workspace's O and log-sum-exp partials and its flags
        elements, flag_count, lse_offset = ws_o.numel() + ws_lse.numel(), ws_flags.numel(), ws_o.numel() * 4

        def direct(q, k_cache, v_cache, block_table, seq_lens):
            if capturing():
                out = empty(shape, dtype=dtype, device=device)
                launch(q, k_cache, v_cache, block_table, seq_lens, out, row.causal, row.scale)
                return out
            # The kernel reads Q and writes O head-major: q's and out's own memory at S_q = 1, copies above it.
            q_heads = q if seq_q == 1 else q.transpose(1, 2).contiguous()
            out_heads = empty(shape if seq_q == 1 else heads_shape, dtype=dtype, device=device)
            stream = current_stream(index)
            partials, flags = stream_workspace(device, stream, elements, flag_count)
            lse2 = empty((batch * heads * seq_q,), dtype=float32, device=device)
            base = partials.data_ptr()
            bound(block_table.data_ptr(), seq_lens.data_ptr(), q_heads.data_ptr(), k_cache.data_ptr(),
                  v_cache.data_ptr(), out_heads.data_ptr(), lse2.data_ptr(), base, base + lse_offset,
                  flags.data_ptr(), stream=stream)
            return out_heads if seq_q == 1 else out_heads.transpose(1, 2).contiguous()

        self.direct = direct


_calls = Signatures()  # the description of the arguments -> its PagedCall


def call_for(q, k_cache, v_cache, block_table, seq_lens, causal, scale) -> PagedCall:
    """The ``PagedCall`` of these arguments: made at the first call of their description (``validate_paged``),
    then looked up."""
    try:
        # The types are part of the key: True == 1 would otherwise let a bool scale (refused) find a float's call.
        key = (describe(q), describe(k_cache), describe(v_cache), describe(block_table), describe(seq_lens), causal,
               type(causal), scale, type(scale))
        found = _calls.get(key)
    except (TypeError, AttributeError):  # not arrays, unhashable arguments, symbolic sizes: checked afresh
        key = found = None
    if found is None:
        kind = same_kind("q", q, k_cache=k_cache, v_cache=v_cache, block_table=block_table, seq_lens=seq_lens)
        if kind == "torch":
            same_device("q", q, k_cache=k_cache, v_cache=v_cache, block_table=block_table, seq_lens=seq_lens)
        row = validate_paged(q, k_cache, v_cache, block_table, seq_lens, causal, scale)
        found = _calls.remember(key, PagedCall(kind, row, int(q.shape[1]), int(k_cache.shape[0]),
                                               int(k_cache.shape[1])))
    return found


def validate_paged(q, k_cache, v_cache, block_table, seq_lens, causal, scale) -> Problem:
    """Every check that does not read the table's or the lengths' values; ops.attention's problem of one token."""
    if len(q.shape) != 4:
        raise ArgumentError(f"q must be 4-D [batch, seq_q, heads, head_dim], got shape {tuple(q.shape)}")
    for name, value in (("k_cache", k_cache), ("v_cache", v_cache)):
        if len(value.shape) != 4:
            raise ArgumentError(f"{name} must be 4-D [num_pages, page_size, kv_heads, head_dim], got shape "
                                f"{tuple(value.shape)}")
    if tuple(v_cache.shape) != tuple(k_cache.shape):
        raise ArgumentError(f"v_cache must have k_cache's shape {tuple(k_cache.shape)}, got {tuple(v_cache.shape)}")
    batch = int(q.shape[0])
    page_size = int(k_cache.shape[1])
    if not PAGE_SIZES[0] <= page_size <= PAGE_SIZES[1] or page_size % PAGE_MULTIPLE:
        raise ArgumentError(f"page_size (k_cache.shape[1]) is {page_size}; attention_paged takes "
                            f"{PAGE_SIZES[0]} to {PAGE_SIZES[1]}, a multiple of {PAGE_MULTIPLE}")
    for name, value in (("k_cache", k_cache), ("v_cache", v_cache)):  # q: attention_paged copied it
        if not _contiguous(value):
            raise ArgumentError(f"{name} must be contiguous (a copy per call would be the whole cache); make a "
                                f"contiguous cache")
    if int(k_cache.shape[0]) == 0:
        raise ArgumentError("k_cache has no pages (k_cache.shape[0] is 0): a sequence's keys live in pages")
    # ops.attention's checks (dtypes, head dims, head counts, causal, scale) on one token of each (of q: none for an
    # empty batch), up front.
    row = validate(*(heads_first(x.reshape(-1, *x.shape[2:])[:1]) for x in (q, k_cache, v_cache)), causal, scale)
    for name, value, rank in (("block_table", block_table, 2), ("seq_lens", seq_lens, 1)):
        found = dtype_of(value)
        if len(value.shape) != rank or found is None or found.name != "int32":
            raise ArgumentError(f"{name} must be a {rank}-D int32 array, got shape {tuple(value.shape)} and dtype "
                                f"{found.name if found else value.dtype}")
        if not _contiguous(value):
            raise ArgumentError(f"{name} must be contiguous (the kernel reads it as a dense array); make a contiguous "
                                f"copy first")
    if int(block_table.shape[0]) != batch or int(seq_lens.shape[0]) != batch:
        raise ArgumentError(f"block_table has {int(block_table.shape[0])} rows and seq_lens {int(seq_lens.shape[0])} "
                            f"entries; q has batch {batch}")
    if batch > MAX_GRID_Y:
        raise ArgumentError(f"q has batch {batch}; at most {MAX_GRID_Y} (the grid's z extent)")
    # math.prod of the sizes: torch.compile traces np.prod as a tensor op, whose int() it cannot guard on.
    if max(math.prod(q.shape), math.prod(k_cache.shape)) > MAX_INT32:
        raise ArgumentError("q or the caches have more than 2**31 - 1 elements, which the kernel's int32 offsets "
                            "cannot address")
    return row


def check_contents(found: PagedCall, block_table, seq_lens) -> tuple[np.ndarray, np.ndarray]:
    """The checks of the table's and the lengths' values, every call: one copy of each to the host and vectorised
    checks (a decode step's table holds thousands of pages); the first offending entry names itself. Returns both
    as host arrays (the lengths as int64)."""
    pages, lengths = _host_array(block_table), _host_array(seq_lens).astype(np.int64)
    if not lengths.size:
        return pages, lengths
    least, page_size = max(found.seq_q, 1), found.page_size
    max_pages = int(pages.shape[1])
    if lengths.min() < least:
        b = int(np.argmax(lengths < least))
        raise ArgumentError(f"seq_lens[{b}] is {lengths[b]}; it counts the sequence's keys, the {found.seq_q} new "
                            f"tokens included, so it must be at least {least}")
    if lengths.max() > max_pages * page_size:
        b = int(np.argmax(lengths > max_pages * page_size))
        raise ArgumentError(f"seq_lens[{b}] is {lengths[b]}, above the table's capacity max_pages * page_size = "
                            f"{max_pages} * {page_size} = {max_pages * page_size}")
    # Seen as unsigned, a negative index is above every page count: one comparison checks both bounds.
    outside = pages.view(np.uint32) >= found.num_pages
    if outside.any():
        used = np.arange(max_pages)[None, :] < (-(-lengths // page_size))[:, None]
        bad = np.argwhere(used & outside)
        if bad.size:
            b, p = (int(i) for i in bad[0])
            raise ArgumentError(f"block_table[{b}, {p}] is {pages[b, p]}: a page index must lie in [0, "
                                f"{found.num_pages}) (k_cache.shape[0])")
    return pages, lengths


def _host_array(x) -> np.ndarray:
    """``x`` (a numpy array or a torch tensor on any device) as a numpy array on the host."""
    return x if isinstance(x, np.ndarray) else x.detach().cpu().numpy()


_scripts: dict = {}  # (dtype name, head dim, causal, page size) -> the paged kernel pinned to its schedule


def key_tile(head_dim: int, page_size: int) -> int:
    """The key tile of the paged kernel: the largest multiple of 16 rows that divides the page and is at most the
    dense kernel's shipped tile for the head dim."""
    widest = min(DEFAULT_SCHEDULES[head_dim]["block_n"], page_size)
    return max(n for n in range(PAGE_MULTIPLE, widest + 1, PAGE_MULTIPLE) if page_size % n == 0)


def launch(q, k_cache, v_cache, block_table, seq_lens, out, causal: bool, scale: float) -> tuple | None:
    """One launch on validated operands on the selected back end: few query rows (decode, speculative decoding) on
    the split-KV decode kernel (``attention_decode.launch_decode_paged``, whose (Script, arguments) it returns),
    the rest on the paged kernel (None)."""
    dtype = dtype_of(q)
    assert dtype is not None
    batch, seq_q, heads, head_dim = (int(x) for x in q.shape)
    num_pages, page_size, kv_heads = (int(x) for x in k_cache.shape[:3])
    problem = Problem(batch, heads, kv_heads, seq_q, int(block_table.shape[1]) * page_size, head_dim, dtype, causal,
                      scale)
    if uses_paged_decode(problem):
        return launch_decode_paged(q, k_cache, v_cache, block_table, seq_lens, out, problem)
    key = (dtype.name, head_dim, causal, page_size)
    if key not in _scripts:
        schedule = dict(DEFAULT_SCHEDULES[head_dim], block_n=key_tile(head_dim, page_size))
        tuned = AttentionPaged(dtype, head_dim=head_dim, causal=causal, page_size=page_size)
        _scripts[key] = tuned.instantiate(schedule)
    lse2 = np.empty((heads, batch * seq_q), np.float32) if isinstance(q, np.ndarray) else \
        sys.modules["torch"].empty((heads, batch * seq_q), dtype=sys.modules["torch"].float32, device=q.device)
    _scripts[key](batch, seq_q, num_pages, int(block_table.shape[1]), heads, heads // kv_heads, scale * LOG2_E,
                  block_table, seq_lens, q, k_cache, v_cache, out, lse2)
    return None


_op = None


def _torch_op():
    """The custom op ``warpspec::attention_paged(q, k_cache, v_cache, block_table, seq_lens, causal, scale) ->
    out``, registered at the first use or when this module is imported after torch."""
    global _op
    if _op is None:
        from warpspec.torch_ops import custom_op

        _op = custom_op("warpspec::attention_paged", _op_implementation,
                        schema="(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table, Tensor seq_lens, "
                               "bool causal, float scale) -> Tensor")
    return _op


def _op_implementation(q, k_cache, v_cache, block_table, seq_lens, causal, scale):
    """The op's real and fake implementation: allocate, then launch (nothing runs on fake or meta tensors). The
    caller validated the arguments."""
    import torch

    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if not runtime.shape_only((q, k_cache, v_cache)):
        launch(q, k_cache, v_cache, block_table, seq_lens, out, causal, scale)
    return out


def _allocate_and_run(q, k_cache, v_cache, block_table, seq_lens, found: PagedCall):
    """The op's implementation for plain CUDA tensors of a validated call, whose first decode launch binds
    ``found.direct``."""
    out = sys.modules["torch"].empty(q.shape, dtype=q.dtype, device=q.device)
    launched = launch(q, k_cache, v_cache, block_table, seq_lens, out, found.row.causal, found.row.scale)
    if launched is not None and found.direct is None:
        found.bind(out, launched)
    return out

