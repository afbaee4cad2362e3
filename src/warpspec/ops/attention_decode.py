"""When ``ops.attention`` runs the decode kernel (``warpspec.ops.attention_decode_kernel``) instead of the forward
kernel, how many query heads each block packs, how many key splits, and the launch with its workspace: few query
rows (S_q <= ``MAX_DECODE_QUERIES``: decode and speculative decoding) at D 64 or 128. The forward kernel's 128-row
query tiles would be almost empty there, and it would read K and V once per query head; the decode kernel reads
them once per pack of the heads that share them, split over enough blocks to fill the GPU twice over."""

from __future__ import annotations

from warpspec.frontend.interpreter import cdiv
from warpspec.ops.attention_decode_kernel import DECODE_ROWS, Decode
from warpspec.ops.attention_kernel import LOG2_E
from warpspec.ops.workspace import workspace_like

MAX_DECODE_QUERIES = 16
NUM_SMS = 132  # the H200's
#: Blocks to aim for: two waves of the SMs (one block per SM leaves the memory system idle between tiles).
TARGET_BLOCKS = 2 * NUM_SMS
#: At most this many splits: the last split of a pack folds the others' partials in one after another, so more
#: splits than this cost more in that chain than the reads they spread.
MAX_SPLITS = 16
#: The shipped schedule of each head dim: 64-key tiles in 2 stages, so that two blocks share an SM (80 KB of shared
#: memory each at D 128) and keep twice the loads in flight: on the H200 (2026-12-04, bf16, D 128, 32/8 heads)
#: the fastest of (64, 2), (64, 4), (64, 6), (128, 2), (128, 3) at batch 32 (4.04 TB/s at S_k 8192 against 3.84
#: for 4 stages) and as fast as any at batch 1. D = 256 is not split: the combine holds O and an earlier split's
#: O_s (128 float32 registers each) and spills.
DEFAULT_DECODE_SCHEDULES = {64: {"block_n": 64, "num_stages": 2}, 128: {"block_n": 64, "num_stages": 2}}

_kernels: dict = {}  # (dtype name, head_dim, causal, pack) -> pinned decode Script


def uses_decode(problem) -> bool:
    """Whether ``problem`` runs on the decode kernel: few query rows, and a head dim it has a schedule for (D 256 is
    not: its combine holds O and an earlier split's O_s, 128 float32 registers each, and spills)."""
    return 0 < problem.seq_q <= MAX_DECODE_QUERIES and problem.head_dim in DEFAULT_DECODE_SCHEDULES


def pack_size(problem) -> int:
    """Query heads per decode block: the largest divisor of the group (query heads per K/V head) whose rows,
    ``pack · S_q``, fit in the block's 64."""
    group = problem.heads // problem.kv_heads
    return max(p for p in range(1, group + 1) if group % p == 0 and p * problem.seq_q <= DECODE_ROWS)


def split_count(problem) -> int:
    """The number of key splits per pack of query heads for ``problem`` (1 when it does not run on the decode
    kernel, or when its packs fill the GPU by themselves)."""
    if not uses_decode(problem):
        return 1
    packs = problem.batch * problem.heads // pack_size(problem)
    block_n = DEFAULT_DECODE_SCHEDULES[problem.head_dim]["block_n"]
    return max(1, min(cdiv(TARGET_BLOCKS, packs), MAX_SPLITS, cdiv(problem.seq_k, block_n)))


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
    multiple of the tile), the number of splits (no split without keys), and the workspace it needs: per slot (a
    pack of query heads in one split) O and the log-sum-exp of the pack's ``pack · S_q`` rows, and one flag per
    pack (the count of its splits that left their partial)."""
    assert uses_decode(problem)
    block_n = DEFAULT_DECODE_SCHEDULES[problem.head_dim]["block_n"]
    chunk = cdiv(cdiv(problem.seq_k, split_count(problem)), block_n) * block_n
    n_splits = cdiv(problem.seq_k, chunk)
    packs = problem.batch * problem.heads // pack_size(problem)
    rows = pack_size(problem) * problem.seq_q
    return chunk, n_splits, n_splits * packs * rows * (problem.head_dim + 1), packs


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
