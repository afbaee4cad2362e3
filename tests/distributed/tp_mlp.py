"""A tensor-parallel MLP on warpspec's ops.matmul, run by ``torchrun --nproc-per-node 2 tests/distributed/tp_mlp.py``
(tests/distributed/test_two_gpus.py starts it where two GPUs exist).

y = gelu(x · W1) · W2 with W1's columns split across the ranks (column-parallel: each rank computes its slice of
the hidden layer, gelu fused into the kernel) and W2's rows split likewise (row-parallel: each rank a partial sum
of y, in float32, added by an all_reduce). Checked on every rank against the one-GPU result in float32 (torch,
the whole weights): the forward, the gradients of x and of the rank's weight slices, and the forward replayed
from a CUDA graph captured on the rank (NCCL's all_reduce inside the graph) on new inputs. Prints one line per
rank when all match; any mismatch raises, and the job fails.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from common import CopyToRanks, ReduceFromRanks, check, join, replayed_on

import warpspec.ops as ops

TOKENS, HIDDEN, FFN = 256, 512, 1024
DTYPE = torch.bfloat16
TOLERANCE = 2e-2  # relative, bfloat16 operands and hidden layer against float32


def reference(x, w1, w2):
    """The one-GPU MLP in float32, gelu as the kernel's (tanh approximation)."""
    return torch.nn.functional.gelu(x.float() @ w1.float(), approximate="tanh") @ w2.float()


def main() -> None:
    rank, world = join()
    torch.manual_seed(0)  # the same full tensors on every rank
    x = torch.randn(TOKENS, HIDDEN, device="cuda", dtype=DTYPE)
    w1 = (torch.randn(HIDDEN, FFN, device="cuda") * HIDDEN ** -0.5).to(DTYPE)
    w2 = (torch.randn(FFN, HIDDEN, device="cuda") * FFN ** -0.5).to(DTYPE)
    dy = torch.randn(TOKENS, HIDDEN, device="cuda")
    shard = slice(rank * FFN // world, (rank + 1) * FFN // world)
    w1_local = w1[:, shard].contiguous().requires_grad_()
    w2_local = w2[shard, :].contiguous().requires_grad_()

    def forward(inputs):
        hidden = ops.matmul(CopyToRanks.apply(inputs), w1_local, activation="gelu")
        return ReduceFromRanks.apply(ops.matmul(hidden, w2_local, out_dtype=torch.float32))

    # Forward and backward against the one-GPU reference.
    x_local = x.clone().requires_grad_()
    y = forward(x_local)
    (y * dy).sum().backward()
    x_ref, w1_ref, w2_ref = (t.float().requires_grad_() for t in (x, w1, w2))
    y_ref = reference(x_ref, w1_ref, w2_ref)
    (y_ref * dy).sum().backward()
    check("y", y, y_ref, TOLERANCE)
    check("dx", x_local.grad, x_ref.grad, TOLERANCE)
    check("dW1 (this rank's columns)", w1_local.grad, w1_ref.grad[:, shard], TOLERANCE)
    check("dW2 (this rank's rows)", w2_local.grad, w2_ref.grad[shard, :], TOLERANCE)
    # The same as one warpspec GPU computes it with the whole weights.
    with torch.no_grad():
        whole = ops.matmul(ops.matmul(x, w1, activation="gelu"), w2, out_dtype=torch.float32)
        check("y against one GPU's ops.matmul", y, whole, TOLERANCE)

    # The forward captured in a CUDA graph on this rank, replayed on new inputs.
    with torch.no_grad():
        fresh = torch.randn(TOKENS, HIDDEN, device="cuda", dtype=DTYPE)
        check("y replayed from the CUDA graph", replayed_on(forward, x, fresh), reference(fresh, w1, w2), TOLERANCE)
    print(f"rank {rank}: forward, backward and graph match", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
