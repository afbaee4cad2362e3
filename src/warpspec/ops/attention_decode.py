"""When ``ops.attention`` runs split-KV (``warpspec.ops.attention_decode_kernel``) instead of the forward kernel, how
many splits, and the launch with its workspace: few query rows (S_q <= ``MAX_DECODE_QUERIES``: decode and
speculative decoding) and fewer (batch, head) rows of blocks than it takes to fill the GPU twice over."""

from __future__ import annotations

from warpspec.frontend.interpreter import cdiv
from warpspec.ops.attention_decode_kernel import DECODE_ROWS, Decode
from warpspec.ops.attention_kernel import LOG2_E
from warpspec.ops.workspace import workspace_like

MAX_DECODE_QUERIES = 16
NUM_SMS = 132  # the H200's
#: Blocks to aim for: two waves of the SMs (one block per SM leaves the memory system idle between tiles).
TARGET_BLOCKS = 2 * NUM_SMS
#: The shipped schedule of each head dim: 64-key tiles, the ring deep enough to keep several loads in flight. D = 256
#: is not split: the combine holds O and an earlier split's O_s (128 float32 registers each) and spills.
DEFAULT_DECODE_SCHEDULES = {64: {"block_n": 64, "num_stages": 4}, 128: {"block_n": 64, "num_stages": 4}}

_kernels: dict = {}  # (dtype name, head_dim, causal) -> pinned decode Script


def split_count(problem) -> int:
    """The number of key splits per (batch, head) for ``problem``, 1 when the forward kernel fills the GPU by
    itself (or the query has too many rows for one decode block, or D is 256)."""
    if not 0 < problem.seq_q <= MAX_DECODE_QUERIES or problem.head_dim not in DEFAULT_DECODE_SCHEDULES:
        return 1
    batch_heads = problem.batch * problem.heads
    block_n = DEFAULT_DECODE_SCHEDULES[problem.head_dim]["block_n"]
    return max(1, min(cdiv(TARGET_BLOCKS, batch_heads), cdiv(problem.seq_k, block_n)))


def decode_kernel(problem):
    """The pinned split-KV Script of the problem's dtype, head dim and causality."""
    key = (problem.dtype.name, problem.head_dim, problem.causal)
    if key not in _kernels:
        _kernels[key] = Decode(problem.dtype, head_dim=problem.head_dim, causal=problem.causal,
                               **DEFAULT_DECODE_SCHEDULES[problem.head_dim])
    return _kernels[key]


def launch_decode(q, k, v, out, lse2, problem, n_splits: int) -> None:
    """Run the split-KV kernel with ``n_splits`` splits. The partials and flags come from ``ops.matmul``'s
    stream-K workspace (``warpspec.ops.workspace``: per device and stream, its flags 0 between launches, since
    the kernel gives each back; fresh within CUDA-graph capture and on the emulator)."""
    assert problem.seq_q <= DECODE_ROWS
    block_n = DEFAULT_DECODE_SCHEDULES[problem.head_dim]["block_n"]
    chunk = cdiv(cdiv(problem.seq_k, n_splits), block_n) * block_n
    n_splits = cdiv(problem.seq_k, chunk)  # no split without keys
    batch_heads = problem.batch * problem.heads
    slots = n_splits * batch_heads
    rows = slots * DECODE_ROWS
    partials, flags = workspace_like(out, rows * (problem.head_dim + 1), slots)
    ws_o = partials[:rows * problem.head_dim].reshape(rows, problem.head_dim)
    ws_lse = partials[rows * problem.head_dim:rows * (problem.head_dim + 1)].reshape(rows, 1)
    decode_kernel(problem)(problem.seq_q, problem.seq_k, batch_heads, problem.heads,
                           problem.heads // problem.kv_heads, problem.scale * LOG2_E, chunk, n_splits, q, k, v, out,
                           lse2, ws_o, ws_lse, flags)

