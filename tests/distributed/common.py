"""What the two ``torchrun`` scripts of this folder share: joining the NCCL job on this rank's GPU, the
differentiable collectives of tensor parallelism, the relative error the results are held to, and capturing a
step in a CUDA graph."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def join() -> tuple[int, int]:
    """Join the job ``torchrun`` started: this rank's GPU made the current device, an NCCL process group.
    Returns (rank, world size)."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    return rank, world


class CopyToRanks(torch.autograd.Function):
    """The input of a column-parallel layer: the same tensor on every rank going forward; going backward, each
    rank's gradient is only its columns' part, so the parts are summed over the ranks."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad


class ReduceFromRanks(torch.autograd.Function):
    """The output of a row-parallel layer: the ranks' partial sums added going forward; going backward every rank
    already holds the whole gradient of the (replicated) result."""

    @staticmethod
    def forward(ctx, partial):
        total = partial.clone()
        dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx, grad):
        return grad


def relative_error(value: torch.Tensor, expected: torch.Tensor) -> float:
    """‖value − expected‖ / ‖expected‖ in float32."""
    expected = expected.float()
    return ((value.float() - expected).norm() / expected.norm()).item()


def check(name: str, value: torch.Tensor, expected: torch.Tensor, tolerance: float) -> None:
    """AssertionError naming ``name``, the rank and the error unless ``value`` is within ``tolerance`` (relative)
    of ``expected``."""
    error = relative_error(value, expected)
    if not error < tolerance:
        raise AssertionError(f"rank {dist.get_rank()}: {name} is off by {error:.2e} (relative), more than "
                             f"{tolerance:.0e}")


def captured(step, *inputs):
    """``step(*inputs)`` captured in a CUDA graph on this rank's current stream, after two warm-up runs on a side
    stream (which build the kernels and let NCCL set up its communicator before the capture). Returns
    ``(graph, output)``: ``graph.replay()`` runs the step again on the inputs' current contents into ``output``."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step(*inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        output = step(*inputs)
    return graph, output


def replayed_on(step, example, fresh):
    """The output of ``step`` captured in a CUDA graph on a copy of ``example`` (``captured``), replayed after
    ``fresh`` is copied into that input: what a graph captured once computes for new data."""
    static_input = example.clone()
    graph, output = captured(step, static_input)
    static_input.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    return output
