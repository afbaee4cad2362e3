"""The workspace of the library's kernels that split tiles: one float32 partial tile and one int32 flag per block.

A stream-K launch (``warpspec.ops.kernels.StreamK``), a split-K one (``SplitGemm``) or a grouped one whose few tiles
split (``warpspec.ops.grouped_kernel``) leaves each block's partial sum of a shared tile in its slot and sets its
flag; the block finishing the tile reads the slot and gives the flag back its 0, so every launch ends with all flags
0 and the next may start. What that asks of the memory:

* the flags must be 0 before the first launch that uses them, and no two launches may use them at the same time:
  eager calls take a workspace per device and stream, made (zeroed) at the first call on that stream and grown when
  a call needs more;
* a call inside CUDA-graph capture takes a workspace of its own from the graph's memory pool, zeroed by a node of
  the graph before the kernel, so every replay starts from zeros whatever ran before it;
* numpy arrays and CPU tensors (the emulator) get a fresh zeroed workspace per call.

Schedules that do not split tiles never touch the workspace; they are passed one-element placeholders.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from warpspec.ops.kernels import Gemm, SplitGemm

_eager: dict = {}  # (device index, stream handle) -> (partials, flags), the largest made on that stream so far
_placeholders: dict = {}  # torch device -> (float32, int32) one-element tensors


def workspace_sizes(m: int, n: int, num_sms: int, schedule: dict | None = None) -> tuple[int, int]:
    """(float32 elements of partial tiles, int32 flags) of one launch over an m × n output: one ``block_m ×
    block_n`` tile and one flag per block of a grid that splits tiles — a stream-K grid has at most ``num_sms``
    blocks, a split-K one ``split_k`` per tile (tiles over N × M with ``swap_ab``) —, for the pinned ``schedule``,
    or (None) the most any schedule of either family needs; (0, 0) for a schedule that splits nothing."""
    if schedule is None:
        sizes = [workspace_sizes(m, n, num_sms, s) for cls in (Gemm, SplitGemm) for s in cls._tune_space.schedules()]
        return max(elements for elements, _ in sizes), max(count for _, count in sizes)
    split = schedule.get("split_k", 1)
    if split == 1 and not schedule.get("stream_k"):
        return 0, 0
    block_m, block_n = schedule["block_m"], schedule["block_n"]
    rows, columns = (n, m) if schedule.get("swap_ab") else (m, n)
    tiles = math.ceil(rows / block_m) * math.ceil(columns / block_n)
    blocks = tiles * split if split > 1 else min(tiles, num_sms)
    return blocks * block_m * block_n, blocks


def workspace_like(out, elements: int, flag_count: int) -> tuple:
    """(partials, flags) on ``out``'s device for a launch needing ``elements`` float32 partials and ``flag_count``
    flags, as the module docstring describes: numpy arrays for numpy ``out``, torch tensors otherwise."""
    if isinstance(out, np.ndarray):
        return np.zeros(elements, np.float32), np.zeros(flag_count, np.int32)
    torch = sys.modules["torch"]
    device = out.device
    if device.type != "cuda":
        return (torch.zeros(elements, dtype=torch.float32, device=device),
                torch.zeros(flag_count, dtype=torch.int32, device=device))
    if torch.cuda.is_current_stream_capturing():
        return (torch.empty(elements, dtype=torch.float32, device=device),
                torch.zeros(flag_count, dtype=torch.int32, device=device))
    return stream_workspace(device, torch.cuda.current_stream(device).cuda_stream, elements, flag_count)


def stream_workspace(device, stream: int, elements: int, flag_count: int) -> tuple:
    """The eager workspace (partials, flags) of CUDA ``device`` (a torch.device) and ``stream`` (its handle),
    made or grown to hold at least ``elements`` partials and ``flag_count`` flags: not for a call inside graph
    capture (``workspace_like`` makes those)."""
    key = (device.index, stream)
    found = _eager.get(key)
    if found is None or found[0].numel() < elements or found[1].numel() < flag_count:
        torch = sys.modules["torch"]
        # Grown on this stream: the old one's memory is reused only after the launches queued on it.
        if found is not None:  # never smaller than before in either part
            elements, flag_count = max(elements, found[0].numel()), max(flag_count, found[1].numel())
        found = _eager[key] = (torch.empty(elements, dtype=torch.float32, device=device),
                               torch.zeros(flag_count, dtype=torch.int32, device=device))
    return found


def placeholders_like(out) -> tuple:
    """One-element (float32, int32) stand-ins for the workspace of a schedule that does not split tiles."""
    if isinstance(out, np.ndarray):
        return np.zeros(1, np.float32), np.zeros(1, np.int32)
    found = _placeholders.get(out.device)
    if found is None:
        torch = sys.modules["torch"]
        found = _placeholders[out.device] = (torch.empty(1, dtype=torch.float32, device=out.device),
                                             torch.empty(1, dtype=torch.int32, device=out.device))
    return found
