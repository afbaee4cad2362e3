"""A tensor-parallel attention block on warpspec's ops, run by ``torchrun --nproc-per-node 2
tests/distributed/tp_attention.py`` (tests/distributed/test_two_gpus.py starts it where two GPUs exist).

out = attention(x · Wqkv) · Wo with the heads split across the ranks: each rank projects x to the q, k and v of
its heads (Wqkv's columns of those heads: column-parallel ``ops.matmul``), runs causal ``ops.attention`` on them,
and multiplies by Wo's rows of its heads (row-parallel, a float32 partial sum), the partial sums added by an
all_reduce. Checked on every rank against the one-GPU block in float32 (torch, all heads): the forward, the
gradients of x and of the rank's weight slices, and the forward replayed from a CUDA graph captured on the rank on
new inputs. Prints one line per rank when all match; any mismatch raises, and the job fails.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from common import CopyToRanks, ReduceFromRanks, check, join, replayed_on

import warpspec.ops as ops

BATCH, SEQ, HEADS, HEAD_DIM = 2, 256, 8, 64
MODEL = HEADS * HEAD_DIM
DTYPE = torch.bfloat16
TOLERANCE = 3e-2  # relative, bfloat16 operands, probabilities and outputs against float32


def split_heads(projected, heads: int):
    """[B·S, 3·heads·D] (q, k, v of each head, in that order) -> q, k, v each [B, heads, S, D], contiguous."""
    parts = projected.reshape(BATCH, SEQ, 3, heads, HEAD_DIM).permute(2, 0, 3, 1, 4)
    return (parts[i].contiguous() for i in range(3))


def merge_heads(out):
    """[B, heads, S, D] -> [B·S, heads·D]."""
    return out.permute(0, 2, 1, 3).reshape(BATCH * SEQ, -1)


def reference(x, w_qkv, w_o):
    """The one-GPU block in float32 over all heads, causal."""
    q, k, v = split_heads(x.float() @ w_qkv.float(), HEADS)
    logits = q @ k.transpose(-1, -2) * HEAD_DIM ** -0.5
    mask = torch.ones(SEQ, SEQ, dtype=torch.bool, device=x.device).tril()
    weights = torch.softmax(logits.masked_fill(~mask, float("-inf")), -1)
    return merge_heads(weights @ v) @ w_o.float()


def main() -> None:
    rank, world = join()
    torch.manual_seed(0)  # the same full tensors on every rank
    x = torch.randn(BATCH * SEQ, MODEL, device="cuda", dtype=DTYPE)
    w_qkv = (torch.randn(MODEL, 3 * MODEL, device="cuda") * MODEL ** -0.5).to(DTYPE)
    w_o = (torch.randn(MODEL, MODEL, device="cuda") * MODEL ** -0.5).to(DTYPE)
    dy = torch.randn(BATCH * SEQ, MODEL, device="cuda")
    local_heads = HEADS // world
    heads = range(rank * local_heads, (rank + 1) * local_heads)
    # Wqkv's columns are (q, k, v) × heads × D: this rank's heads in each of q, k and v.
    columns = torch.tensor([part * MODEL + head * HEAD_DIM + d for part in range(3) for head in heads
                            for d in range(HEAD_DIM)], device="cuda")
    rows = slice(heads.start * HEAD_DIM, heads.stop * HEAD_DIM)
    w_qkv_local = w_qkv[:, columns].contiguous().requires_grad_()
    w_o_local = w_o[rows, :].contiguous().requires_grad_()

    def forward(inputs):
        q, k, v = split_heads(ops.matmul(CopyToRanks.apply(inputs), w_qkv_local), local_heads)
        out = ops.attention(q, k, v, causal=True)
        return ReduceFromRanks.apply(ops.matmul(merge_heads(out), w_o_local, out_dtype=torch.float32))

    x_local = x.clone().requires_grad_()
    y = forward(x_local)
    (y * dy).sum().backward()
    x_ref, w_qkv_ref, w_o_ref = (t.float().requires_grad_() for t in (x, w_qkv, w_o))
    y_ref = reference(x_ref, w_qkv_ref, w_o_ref)
    (y_ref * dy).sum().backward()
    check("out", y, y_ref, TOLERANCE)
    check("dx", x_local.grad, x_ref.grad, TOLERANCE)
    check("dWqkv (this rank's heads)", w_qkv_local.grad, w_qkv_ref.grad[:, columns], TOLERANCE)
    check("dWo (this rank's heads)", w_o_local.grad, w_o_ref.grad[rows, :], TOLERANCE)
    # The same as one warpspec GPU computes it with all heads.
    with torch.no_grad():
        q, k, v = split_heads(ops.matmul(x, w_qkv), HEADS)
        whole = ops.matmul(merge_heads(ops.attention(q, k, v, causal=True)), w_o, out_dtype=torch.float32)
        check("out against one GPU's ops", y, whole, TOLERANCE)

    with torch.no_grad():
        fresh = torch.randn(BATCH * SEQ, MODEL, device="cuda", dtype=DTYPE)
        check("out replayed from the CUDA graph", replayed_on(forward, x, fresh), reference(fresh, w_qkv, w_o),
              TOLERANCE)
    print(f"rank {rank}: forward, backward and graph match", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
