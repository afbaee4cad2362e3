"""When ``ops.attention`` runs the decode kernel (``warpspec.ops.attention_decode_kernel``) instead of the forward
kernel, how many query heads each block packs, how many key splits, and the launch with its workspace: few query
rows (S_q <= ``MAX_DECODE_QUERIES``: decode and speculative decoding) at D 64, 128 or 256. The forward kernel's 128-row
query tiles would be almost empty there, and it would read K and V once per query head; the decode kernel reads
them once per pack of the heads that share them, split over enough blocks to fill the GPU twice over."""

from __future__ import annotations

import sys

import numpy as np

from warpspec.frontend.interpreter import cdiv
from warpspec.ops.attention_decode_kernel import DECODE_ROWS, Decode, DecodePaged
from warpspec.ops.attention_kernel import LOG2_E
from warpspec.ops.kernels import NUM_SMS
from warpspec.ops.workspace import workspace_like

MAX_DECODE_QUERIES = 16
#: Blocks that run at once: two per SM (80 KB of shared memory each at D 128). The splits are as many as keep the
#: packs' blocks within them (one block per SM leaves the memory system idle between tiles), never past them: a
#: block past them waits for a whole chunk's time. On the H100 (2026-12-06, 32/8 heads, D 128, S_k 8192, kernel
#: µs under CUDA graphs) 4 splits at batch 8 took 93.8 against 104.6 for 5, 2 at batch 16 179.4 against 183.6 for
#: 3, and 1 at batch 32 344.7 against 349.7 for 2 (1343.4 against 1351.5 at S_k 32768).
TARGET_BLOCKS = 2 * NUM_SMS
#: At most this many splits: more were slower at batch 1 on the H200 (2026-12-04, 32/8 heads, D 128: 24 and 32
#: splits 148-150 µs against 145 at S_k 131072, 30-33 against 27 at 8192): the partials' traffic and the fold grow,
#: and the blocks no longer fit one wave of one block per SM, while 16 already keep HBM busy at long keys.
MAX_SPLITS = 16
#: The shipped schedule of each head dim: 64-key tiles in 2 stages, so that two blocks share an SM (80 KB of shared
#: memory each at D 128) and keep twice the loads in flight: on the H200 (2026-12-04, bf16, D 128, 32/8 heads)
#: the fastest of (64, 2), (64, 4), (64, 6), (128, 2), (128, 3) at batch 32 (4.04 TB/s at S_k 8192 against 3.84
#: for 4 stages) and as fast as any at batch 1. D = 256 takes 32-key tiles, so that two blocks still share an SM
#: (96 KB each; its O alone is 128 float32 registers a thread, 178 in all with a pack of 4).
DEFAULT_DECODE_SCHEDULES = {64: {"block_n": 64, "num_stages": 2}, 128: {"block_n": 64, "num_stages": 2},
                            256: {"block_n": 32, "num_stages": 2}}

_kernels: dict = {}  # (dtype name, head_dim, causal, pack) -> pinned decode Script
_paged_kernels: dict = {}  # (dtype name, head_dim, causal, pack, page_size) -> pinned paged decode Script


def uses_decode(problem) -> bool:
    """Whether ``problem`` runs on the decode kernel: few query rows, and a head dim it has a schedule for."""
    return 0 < problem.seq_q <= MAX_DECODE_QUERIES and problem.head_dim in DEFAULT_DECODE_SCHEDULES


def pack_size(problem) -> int:
    """Query heads per decode block: the largest divisor of the group (query heads per K/V head) whose rows,
    ``pack · S_q``, fit in the block's 64."""
    group = problem.heads // problem.kv_heads
    return max(p for p in range(1, group + 1) if group % p == 0 and p * problem.seq_q <= DECODE_ROWS)


def split_count(problem) -> int:
    """The number of key splits per pack of query heads for ``problem``: the most whose blocks all run at once
    (``TARGET_BLOCKS``), at most ``MAX_SPLITS`` and the key tiles; 1 when it does not run on the decode kernel, or
    when its packs fill the GPU by themselves."""
    if not uses_decode(problem):
        return 1
    packs = problem.batch * problem.heads // pack_size(problem)
    block_n = DEFAULT_DECODE_SCHEDULES[problem.head_dim]["block_n"]
    return max(1, min(TARGET_BLOCKS // packs, MAX_SPLITS, cdiv(problem.seq_k, block_n)))


def decode_kernel(problem):
    """The pinned decode Script of the problem's dtype, head dim, causality and pack size."""
    pack = pack_size(problem)
    key = (problem.dtype.name, problem.head_dim, problem.causal, pack)
    if key not in _kernels:
        _kernels[key] = Decode(problem.dtype, head_dim=problem.head_dim, causal=problem.causal, pack=pack,
                               **DEFAULT_DECODE_SCHEDULES[problem.head_dim])
    return _kernels[key]


def decode_workspace(problem) -> tuple[int, int, int, int]:
    """(chunk, splits, float32 partials, flags) of ``problem``'s decode launch: the keys each split reads (a
    multiple of the tile), the number of splits (no split without keys), and the workspace it needs
    (``partial_elements``) with one flag per pack (the count of its splits that left their partial)."""
    assert uses_decode(problem)
    block_n = DEFAULT_DECODE_SCHEDULES[problem.head_dim]["block_n"]
    chunk = cdiv(cdiv(problem.seq_k, split_count(problem)), block_n) * block_n
    n_splits = cdiv(problem.seq_k, chunk)
    return chunk, n_splits, partial_elements(problem, n_splits), problem.batch * problem.heads // pack_size(problem)


def partial_elements(problem, n_splits: int) -> int:
    """The float32 elements of the partials of ``n_splits`` splits: per slot (a pack of query heads in one split)
    O and the log-sum-exp of the pack's ``pack · S_q`` rows."""
    packs = problem.batch * problem.heads // pack_size(problem)
    return n_splits * packs * pack_size(problem) * problem.seq_q * (problem.head_dim + 1)


def launch_decode(q, k, v, out, lse2, problem) -> tuple:
    """Run the decode kernel with ``split_count`` splits; returns the (Script, arguments) it called. The partials
    and flags come from ``ops.matmul``'s stream-K workspace (``warpspec.ops.workspace``: per device and stream,
    its flags 0 between launches, since the kernel gives each back; fresh within CUDA-graph capture and on the
    emulator): O's rows first, then the log-sum-exp's (``decode_lse_offset``)."""
    chunk, n_splits, elements, packs = decode_workspace(problem)
    partials, flags = workspace_like(out, elements, packs)
    o_elements = decode_lse_offset(problem) // 4
    ws_o, ws_lse = partials[:o_elements], partials[o_elements:elements]
    script = decode_kernel(problem)
    args = (problem.seq_q, problem.seq_k, problem.batch * problem.heads, problem.heads,
            problem.heads // problem.kv_heads, problem.scale * LOG2_E, chunk, n_splits, q, k, v, out, lse2, ws_o,
            ws_lse, flags)
    script(*args)
    return script, args


def decode_lse_offset(problem) -> int:
    """The byte offset of the log-sum-exp partials in the decode workspace's partials (after O's)."""
    _, _, elements, _ = decode_workspace(problem)
    return elements // (problem.head_dim + 1) * problem.head_dim * 4


def uses_paged_decode(problem) -> bool:
    """Whether ``problem`` (``ops.attention``'s, of the whole batch at the block table's capacity) runs
    ``ops.attention_paged`` on the paged decode kernel: as ``uses_decode``, and its packs fit the grid's y extent."""
    from warpspec.ops.attention import MAX_GRID_Y

    return uses_decode(problem) and problem.batch * problem.heads // pack_size(problem) <= MAX_GRID_Y


def paged_schedule(head_dim: int) -> dict:
    """The paged decode kernel's schedule: the dense decode kernel's, whatever the page size (its tiles are loaded
    16 keys at a time, each load inside one page: ``attention_decode_kernel.PAGE_LOAD``)."""
    return dict(DEFAULT_DECODE_SCHEDULES[head_dim])


def launch_decode_paged(q, k_cache, v_cache, block_table, seq_lens, out, problem) -> tuple:
    """Run the paged decode kernel for ``q`` [B, S_q, H, D] into ``out`` (the same shape) over the caches
    [num_pages, page_size, H_kv, D]; ``problem`` is ``ops.attention``'s of the batch with ``seq_k`` the table's
    capacity (it sets the number of splits; each sequence splits its own keys). The kernel reads Q and writes O
    head-major, [B · H, S_q, D]: at S_q = 1 that is q's and out's own memory, above it a transposed copy each way
    (a few µs at decode's sizes). The partials and flags come from the stream's workspace, as ``launch_decode``'s.
    Returns the (Script, arguments) it called."""
    batch, seq_q, heads, head_dim = (int(x) for x in q.shape)
    num_pages, page_size, kv_heads = (int(x) for x in k_cache.shape[:3])
    pack = pack_size(problem)
    key = (problem.dtype.name, head_dim, problem.causal, pack, page_size)
    if key not in _paged_kernels:
        schedule = paged_schedule(head_dim)
        _paged_kernels[key] = DecodePaged(problem.dtype, head_dim=head_dim, causal=problem.causal, pack=pack,
                                          page_size=page_size, **schedule)
    n_splits = split_count(problem)
    elements = partial_elements(problem, n_splits)
    partials, flags = workspace_like(out, elements, batch * heads // pack)
    o_elements = elements // (head_dim + 1) * head_dim
    numpy = isinstance(q, np.ndarray)
    if seq_q == 1:
        q_heads, out_heads = q, out
    elif numpy:
        q_heads = np.ascontiguousarray(q.transpose(0, 2, 1, 3))
        out_heads = np.empty((batch, heads, seq_q, head_dim), q.dtype)
    else:
        q_heads = q.transpose(1, 2).contiguous()
        out_heads = out.new_empty((batch, heads, seq_q, head_dim))
    lse2 = np.empty(batch * heads * seq_q, np.float32) if numpy else \
        out.new_empty((batch * heads * seq_q,), dtype=sys.modules["torch"].float32)
    script = _paged_kernels[key]
    args = (seq_q, batch, num_pages, int(block_table.shape[1]), heads, heads // kv_heads, problem.scale * LOG2_E,
            n_splits, block_table, seq_lens, q_heads, k_cache, v_cache, out_heads, lse2, partials[:o_elements],
            partials[o_elements:elements], flags)
    script(*args)
    if seq_q > 1:
        if numpy:
            out[...] = out_heads.transpose(0, 2, 1, 3)
        else:
            out.copy_(out_heads.transpose(1, 2))
    return script, args
