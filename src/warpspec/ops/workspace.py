"""The stream-K workspace of ``ops.matmul``'s kernels: one float32 partial tile and one int32 flag per block.

A stream-K launch (``warpspec.ops.kernels.StreamK``) leaves each block's partial sum of a shared tile in its slot
and sets its flag; the block finishing the tile reads the slot and gives the flag back its 0, so every launch ends
with all flags 0 and the next may start. What that asks of the memory:

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

from warpspec.ops.kernels import TILES

_eager: dict = {}  # (device index, stream handle) -> (partials, flags), the largest made on that stream so far
_placeholders: dict = {}  # torch device -> (float32, int32) one-element tensors


def workspace_elements(m: int, n: int, num_sms: int, tile: tuple[int, int] | None = None) -> int:
    """Float32 elements of the partial tiles of one launch over an m × n output with at most ``num_sms`` blocks:
    one ``block_m × block_n`` tile per block of the grid, for ``tile`` or (None) the largest any tile of the
    schedule space needs."""
    def needed(block_m, block_n):
        return min(math.ceil(m / block_m) * math.ceil(n / block_n), num_sms) * block_m * block_n

    return needed(*tile) if tile is not None else max(needed(*t) for t in TILES)


def workspace_like(out, elements: int, num_sms: int) -> tuple:
    """(partials, flags) on ``out``'s device for a launch needing ``elements`` float32 partials and at most
    ``num_sms`` flags, as the module docstring describes: numpy arrays for numpy ``out``, torch tensors otherwise."""
    if isinstance(out, np.ndarray):
        return np.zeros(elements, np.float32), np.zeros(num_sms, np.int32)
    torch = sys.modules["torch"]
    device = out.device
    if device.type != "cuda":
        return (torch.zeros(elements, dtype=torch.float32, device=device),
                torch.zeros(num_sms, dtype=torch.int32, device=device))
    if torch.cuda.is_current_stream_capturing():
        return (torch.empty(elements, dtype=torch.float32, device=device),
                torch.zeros(num_sms, dtype=torch.int32, device=device))
    key = (device.index, torch.cuda.current_stream(device).cuda_stream)
    found = _eager.get(key)
    if found is None or found[0].numel() < elements or found[1].numel() < num_sms:
        # Grown on this stream: the old one's memory is reused only after the launches queued on it.
        found = _eager[key] = (torch.empty(elements, dtype=torch.float32, device=device),
                               torch.zeros(num_sms, dtype=torch.int32, device=device))
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
