"""Attention forward, FlashAttention-3 style: a TMA producer warp, two consumer warpgroups that ping-pong, a
Pipeline each for K and V, and an online softmax with rescaling.

O = softmax(scale · Q·Kᵀ) · V for Q [B, H, S_q, D] and K, V [B, H_kv, S_k, D]. The kernel is the library's,
``warpspec.ops.attention_kernel`` (``warpspec.ops.attention`` validates arguments and calls it); docs/attention.md
walks through it. What it does, one block per 128 query rows of one head:

* The producer warp loads the block's Q tile once (two 64-row slices, one per consumer warpgroup), then K_j and V_j
  for every K/V tile j into two rings of shared-memory stages (``warpspec.Pipeline``): a K stage comes back as
  soon as QKᵀ read it, a V stage once PV did.
* Each consumer warpgroup owns 64 query rows and keeps their running maximum, running sum and O accumulator in
  registers. In iteration j it issues S_j = Q·K_jᵀ, rescales O by exp2(old max - new max) of the previous tile
  while S_j runs, issues O += P_{j-1}·V_{j-1} (P from registers: the cast of the previous iteration's
  probabilities), waits for S_j only, and computes the softmax of S_j while PV still runs.
* The two warpgroups take turns issuing their GEMMs (an mbarrier pair, like examples/matmul_v6.py's ping-pong), so
  one's exp2s run under the other's tensor-core work.
* Tails and causality are masks on the tiles that need them; causal blocks stop at the last K/V tile they see.

Run ``python examples/attention_fwd.py`` to check it against numpy (on the emulator when there is no Hopper GPU):
a ragged shape with grouped-query heads, causal and not.
"""

import numpy as np

import warpspec
from warpspec.dtypes import float16
from warpspec.ops.attention_kernel import LOG2_E, Attention

from example_support import run_on_backend


def reference(q, k, v, causal):
    """softmax(Q·Kᵀ / sqrt(D)) · V in float32 for [BH, S, D] arrays (K/V heads shared by BH // BH_kv query heads),
    causal aligned at the bottom right; rows that see no key are 0."""
    group = q.shape[0] // k.shape[0]
    q32, k32, v32 = (x.astype(np.float32) for x in (q, k, v))
    k32, v32 = np.repeat(k32, group, axis=0), np.repeat(v32, group, axis=0)
    logits = q32 @ k32.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    if causal:
        seq_q, seq_k = q.shape[1], k.shape[1]
        visible = np.arange(seq_k)[None, :] <= np.arange(seq_q)[:, None] + seq_k - seq_q
        logits = np.where(visible, logits, -np.inf)
    row_max = logits.max(-1, keepdims=True)
    weights = np.exp(logits - np.where(np.isinf(row_max), 0.0, row_max))
    total = weights.sum(-1, keepdims=True)
    return weights @ v32 / np.where(total == 0, 1.0, total)


def check_attention(kernel_class=Attention, head_dim=64, heads=4, kv_heads=2, seq_q=200, seq_k=150) -> None:
    """Run the kernel (shipped-default-like schedule: 64-row K/V tiles, 2 stages) at a ragged grouped-query shape,
    causal and not, compare with numpy and print the verdicts."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((heads, seq_q, head_dim)).astype(np.float16)
    k = rng.standard_normal((kv_heads, seq_k, head_dim)).astype(np.float16)
    v = rng.standard_normal((kv_heads, seq_k, head_dim)).astype(np.float16)
    for causal in (False, True):
        kernel = kernel_class(float16, head_dim=head_dim, causal=causal, block_n=64, num_stages=2, unroll=1)
        out = np.full_like(q, np.nan)  # NaN shows any row left unwritten
        *_, out, _lse = run_on_backend(kernel, seq_q, seq_k, heads, heads, heads // kv_heads, head_dim ** -0.5 * LOG2_E,
                                 q, k, v, out, np.empty((heads, seq_q), np.float32))
        error = np.abs(out.astype(np.float32) - reference(q, k, v, causal)).max()
        print(f"{warpspec.get_backend()}: causal={causal} max abs error {error:.4f} vs numpy")
        assert error < 2e-2, error
    print("OK")


if __name__ == "__main__":
    check_attention()
