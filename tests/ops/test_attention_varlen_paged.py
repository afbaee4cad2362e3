"""ops.attention_varlen and ops.attention_paged on the emulator: against per-sequence dense results (ragged lengths,
grouped-query heads, both causal modes; varlen in one launch of the packed kernel), gradients through varlen with
CPU tensors, every ArgumentError before anything runs, and the packed kernel's NVRTC build (no spills)."""

import importlib

import numpy as np
import pytest

from tests.ops.test_attention import expected
from tests.support.paged import fill_unwritten_slots

import warpspec
from warpspec import ArgumentError, bfloat16, float16
from warpspec.ops import attention_paged, attention_varlen

torch = pytest.importorskip("torch")

from torch.nn.attention.bias import causal_lower_right  # noqa: E402


@pytest.fixture(autouse=True)
def emulator():
    with warpspec.use_backend("emulator"):
        yield


def heads_first(x):
    return np.ascontiguousarray(x.transpose(1, 0, 2))[None]


def packed(lengths_q, lengths_k, heads=4, kv_heads=2, head_dim=64, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((sum(lengths_q), heads, head_dim)).astype(np.float16)
    k = rng.standard_normal((sum(lengths_k), kv_heads, head_dim)).astype(np.float16)
    v = rng.standard_normal((sum(lengths_k), kv_heads, head_dim)).astype(np.float16)
    cu_q = np.concatenate([[0], np.cumsum(lengths_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lengths_k)]).astype(np.int32)
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_varlen_matches_each_sequence_dense(causal):
    """Four sequences: one empty query, ragged lengths, S_q > S_k (causal rows without keys are 0)."""
    lengths_q, lengths_k = [70, 0, 130, 5], [90, 20, 64, 3]
    q, k, v, cu_q, cu_k = packed(lengths_q, lengths_k)
    out = attention_varlen(q, k, v, cu_q, cu_k, causal=causal)
    assert out.shape == q.shape and out.dtype == q.dtype
    for b in range(4):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if rows.start == rows.stop:
            continue
        want = expected(heads_first(q[rows]), heads_first(k[keys]), heads_first(v[keys]), causal)[0]
        assert np.abs(out[rows].astype(np.float32) - want.transpose(1, 0, 2)).max() < 2e-3


@pytest.mark.parametrize("scale", [-0.3, 0.0], ids=["negative", "zero"])
def test_varlen_and_paged_take_a_negative_or_zero_scale(scale):
    """As ops.attention takes it (``fold_scale_sign``): each sequence's result is the dense one at that scale."""
    lengths = [40, 3, 70]
    q, k, v, cu_q, cu_k = packed(lengths, lengths)
    out = attention_varlen(q, k, v, cu_q, cu_k, causal=True, scale=scale)
    for b in range(3):
        rows = slice(cu_q[b], cu_q[b + 1])
        want = expected(heads_first(q[rows]), heads_first(k[rows]), heads_first(v[rows]), True, scale)[0]
        assert np.abs(out[rows].astype(np.float32) - want.transpose(1, 0, 2)).max() < 2e-3
    q, k_cache, v_cache, table, seq_lens = paged_operands([37, 50], 2, page_size=16)
    out = attention_paged(q, k_cache, v_cache, table, seq_lens, scale=scale)
    for b, length in enumerate(seq_lens):
        keys = k_cache[table[b]].reshape(-1, 2, 64)[:length]
        values = v_cache[table[b]].reshape(-1, 2, 64)[:length]
        want = expected(heads_first(q[b]), heads_first(keys), heads_first(values), True, scale)[0]
        assert np.abs(out[b].astype(np.float32) - want.transpose(1, 0, 2)).max() < 2e-3


def test_varlen_with_an_empty_batch_is_an_empty_result():
    """No sequences (cu_seqlens [0]): the longest sequence's length was the max() of no lengths, a raw
    ValueError."""
    q, k, v, _, _ = packed([4], [4])
    none = np.zeros(1, np.int32)
    assert attention_varlen(q[:0], k[:0], v[:0], none, none).shape == (0,) + q.shape[1:]
    tq = torch.from_numpy(q[:0]).requires_grad_()
    out = attention_varlen(tq, torch.from_numpy(k[:0]), torch.from_numpy(v[:0]), torch.from_numpy(none),
                           torch.from_numpy(none))
    out.float().sum().backward()
    assert tq.grad.shape == tq.shape


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_varlen_random_lengths_run_in_one_launch(causal, monkeypatch):
    """Six sequences of random lengths 1-200 (S_q and S_k drawn apart), fp16 and grouped-query heads: one launch
    of the packed kernel, each sequence's rows its dense result."""
    module = importlib.import_module("warpspec.ops.attention_varlen")
    launches = []
    monkeypatch.setattr(module, "launch", _counted(module.launch, launches))
    rng = np.random.default_rng(7)
    lengths_q, lengths_k = rng.integers(1, 201, 6).tolist(), rng.integers(1, 201, 6).tolist()
    q, k, v, cu_q, cu_k = packed(lengths_q, lengths_k, seed=3)
    out = attention_varlen(q, k, v, cu_q, cu_k, causal=causal)
    assert len(launches) == 1
    for b in range(6):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        want = expected(heads_first(q[rows]), heads_first(k[keys]), heads_first(v[keys]), causal)[0]
        assert np.abs(out[rows].astype(np.float32) - want.transpose(1, 0, 2)).max() < 2e-3


def _counted(function, calls):
    def counted(*args):
        calls.append(args)
        return function(*args)
    return counted


def test_the_packed_kernel_builds_without_spills():
    """NVRTC compiles the packed kernel at each head dim's shipped schedule (causal) with no spills, no stack and
    no ptxas advisory; its scalar loads are LDGs."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble, parse_ptxas_log
    from warpspec.ops.attention import DEFAULT_SCHEDULES
    from warpspec.ops.attention_varlen_kernel import AttentionVarlen
    from warpspec.runtime import kernel_for

    for head_dim in sorted(DEFAULT_SCHEDULES):
        kernel = AttentionVarlen(bfloat16, head_dim=head_dim, causal=True, **DEFAULT_SCHEDULES[head_dim])
        built = compile_kernel(kernel_for(kernel, {}))
        (report,) = parse_ptxas_log(built.module.log).values()
        assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == \
            (0, 0, 0, ())
        counts = count_instructions(disassemble(built.module.cubin), ["HGMMA", "LDG", "LDL", "STL"])
        assert counts["HGMMA"] > 0 and counts["LDG"] >= 4 and counts["LDL"] == counts["STL"] == 0


@pytest.mark.gpu
def test_gpu_varlen_matches_each_sequence_dense():
    lengths_q, lengths_k = [300, 1, 129, 77], [300, 50, 129, 200]
    q, k, v, cu_q, cu_k = (torch.from_numpy(x).cuda() for x in packed(lengths_q, lengths_k, head_dim=128))
    with warpspec.use_backend("cuda"):
        out = attention_varlen(q, k, v, cu_q, cu_k, causal=True)
    torch.cuda.synchronize()
    for b in range(4):
        rows, keys = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        mask = causal_lower_right(rows.stop - rows.start, keys.stop - keys.start)
        want = torch.nn.functional.scaled_dot_product_attention(
            *(x[s].float().transpose(0, 1)[None] for x, s in ((q, rows), (k, keys), (v, keys))), attn_mask=mask,
            enable_gqa=True)[0].transpose(0, 1)
        assert (out[rows].float() - want).abs().max().item() < 2e-3


def test_varlen_gradients_with_cpu_tensors():
    """Each sequence's gradient is its own: against torch float32 attention per sequence."""
    q, k, v, cu_q, cu_k = (torch.from_numpy(x) for x in packed([40, 70], [50, 70], heads=2, kv_heads=2, seed=1))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    weights = torch.randn(q.shape, generator=torch.Generator().manual_seed(0))
    (attention_varlen(q, k, v, cu_q, cu_k, causal=True).float() * weights).sum().backward()
    leaves = [x.detach().float().requires_grad_() for x in (q, k, v)]
    total = 0
    for b in range(2):
        rows, keys = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        mask = causal_lower_right(rows.stop - rows.start, keys.stop - keys.start)
        out = torch.nn.functional.scaled_dot_product_attention(
            *(x[s].transpose(0, 1)[None] for x, s in ((leaves[0], rows), (leaves[1], keys), (leaves[2], keys))),
            attn_mask=mask)
        total = total + (out[0].transpose(0, 1) * weights[rows]).sum()
    total.backward()
    for got, want in zip((q.grad, k.grad, v.grad), leaves):
        assert ((got.float() - want.grad).abs().max() / want.grad.abs().max()).item() < 4e-3


def test_varlen_takes_slices_of_a_packed_projection():
    """q, k and v as slices of one [total, 3, H, D] projection (strided rows) give what their contiguous copies
    give, and the gradients reach the projection (before, an ArgumentError asked for contiguous tensors)."""
    lengths = [40, 9, 70]
    q, k, v, cu_q, cu_k = packed(lengths, lengths, heads=2, kv_heads=2, seed=2)
    qkv = np.stack([q, k, v], axis=1)  # [total, 3, H, D]
    strided = attention_varlen(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_q, cu_k, causal=True)
    assert not qkv[:, 0].flags.c_contiguous
    assert np.array_equal(strided, attention_varlen(q, k, v, cu_q, cu_k, causal=True))

    projection = torch.from_numpy(qkv).requires_grad_()
    weights = torch.randn(q.shape, generator=torch.Generator().manual_seed(1))
    tq, tk, tv = projection.unbind(1)
    (attention_varlen(tq, tk, tv, torch.from_numpy(cu_q), torch.from_numpy(cu_k), causal=True).float()
     * weights).sum().backward()
    leaves = [torch.from_numpy(x).requires_grad_() for x in (q, k, v)]
    (attention_varlen(*leaves, torch.from_numpy(cu_q), torch.from_numpy(cu_k), causal=True).float()
     * weights).sum().backward()
    for index, leaf in enumerate(leaves):
        assert torch.equal(projection.grad[:, index], leaf.grad)


def paged_operands(seq_lens, seq_q, page_size, heads=4, kv_heads=2, head_dim=64, seed=0):
    """A cache with each sequence's pages scattered in a random order, and the dense keys they hold."""
    rng = np.random.default_rng(seed)
    max_pages = max(-(-n // page_size) for n in seq_lens) + 1
    num_pages = len(seq_lens) * max_pages + 3
    k_cache = rng.standard_normal((num_pages, page_size, kv_heads, head_dim)).astype(np.float16)
    v_cache = rng.standard_normal((num_pages, page_size, kv_heads, head_dim)).astype(np.float16)
    order = rng.permutation(num_pages).astype(np.int32)
    table = order[:len(seq_lens) * max_pages].reshape(len(seq_lens), max_pages)
    q = rng.standard_normal((len(seq_lens), seq_q, heads, head_dim)).astype(np.float16)
    return q, k_cache, v_cache, np.ascontiguousarray(table), np.array(seq_lens, np.int32)


@pytest.mark.parametrize("seq_q, causal, page_size", [(1, True, 16), (5, True, 16), (20, False, 16), (3, True, 64),
                                                     (130, False, 256), (7, True, 48)])
def test_paged_matches_each_sequence_dense(seq_q, causal, page_size, monkeypatch):
    """One launch of the paged kernel (key tiles of 16 to 128 rows inside a page) against each sequence's keys
    gathered from its pages."""
    module = importlib.import_module("warpspec.ops.attention_paged")
    launches = []
    monkeypatch.setattr(module, "launch", _counted(module.launch, launches))
    q, k_cache, v_cache, table, seq_lens = paged_operands([137, 150, 131], seq_q, page_size=page_size)
    out = attention_paged(q, k_cache, v_cache, table, seq_lens, causal=causal)
    assert len(launches) == 1
    assert out.shape == q.shape and out.dtype == q.dtype
    for b, length in enumerate(seq_lens):
        keys = k_cache[table[b]].reshape(-1, 2, 64)[:length]
        values = v_cache[table[b]].reshape(-1, 2, 64)[:length]
        want = expected(heads_first(q[b]), heads_first(keys), heads_first(values), causal)[0]
        assert np.abs(out[b].astype(np.float32) - want.transpose(1, 0, 2)).max() < 2e-3


@pytest.mark.parametrize("seq_lens, page_size, head_dim, causal", [
    ([137, 70, 256], 256, 64, True),   # tiles of 128: the last one moved back inside its page, above its page, none
    ([100, 33, 48], 48, 64, False),    # tiles of 48: the last tile at a page's first row moves above the page
    ([37, 20, 32], 16, 128, True),     # tiles of 16 (a page each)
])
def test_paged_prefill_never_reads_unwritten_slots(seq_lens, page_size, head_dim, causal):
    """The paged kernel (S_q 20: past the decode kernel's 16) with NaN in every cache slot past each sequence's
    keys: a masked score's probability is 0, but 0 · NaN is NaN, so the last tile is loaded moved back to end at
    the sequence's last key. Outputs finite and equal to each sequence's dense result."""
    q, k_cache, v_cache, table, lengths = paged_operands(seq_lens, 20, page_size=page_size, head_dim=head_dim)
    for cache in (k_cache, v_cache):
        fill_unwritten_slots(cache, table, lengths)
    out = attention_paged(q, k_cache, v_cache, table, lengths, causal=causal)
    assert np.isfinite(out.astype(np.float32)).all()
    for b, length in enumerate(lengths):
        keys = k_cache[table[b]].reshape(-1, 2, head_dim)[:length]
        values = v_cache[table[b]].reshape(-1, 2, head_dim)[:length]
        want = expected(heads_first(q[b]), heads_first(keys), heads_first(values), causal)[0]
        assert np.abs(out[b].astype(np.float32) - want.transpose(1, 0, 2)).max() < 2e-3


def _varlen_cases():
    q, k, v, cu_q, cu_k = packed([10, 20], [10, 20])
    return {
        "decreasing": ((q, k, v, np.array([0, 20, 10, 30], np.int32), np.array([0, 10, 20, 30], np.int32)), {},
                       "cu_seqlens_q must not decrease: cu_seqlens_q[2] = 10 < cu_seqlens_q[1] = 20"),
        "total": ((q, k, v, np.array([0, 10, 25], np.int32), cu_k), {},
                  "cu_seqlens_q must end at the total q.shape[0] = 30, got 25"),
        "start": ((q, k, v, cu_q, np.array([1, 10, 30], np.int32)), {}, "cu_seqlens_k must start at 0, got 1"),
        "dtype": ((q, k, v, cu_q.astype(np.int64), cu_k), {}, "cu_seqlens_q must be int32, got dtype int64"),
        "strided": ((q, k, v, cu_q, np.repeat(cu_k, 2)[::2]), {},
                    "cu_seqlens_k must be contiguous (the kernel reads it as a dense array)"),
        "batch": ((q, k, v, cu_q, np.array([0, 30], np.int32)), {},
                  "cu_seqlens_q has 3 entries but cu_seqlens_k 2"),
        "rank": ((q[None], k, v, cu_q, cu_k), {}, "q must be 3-D [total_tokens, heads, head_dim]"),
        "head-dim": ((q[..., :32].copy(), k[..., :32].copy(), v[..., :32].copy(), cu_q, cu_k), {},
                     "head_dim (q.shape[3]) is 32"),
        "mixed-kind": ((q, k, v, torch.from_numpy(cu_q), cu_k), {},
                       "cu_seqlens_q is a torch tensor but q is a numpy array"),
    }


@pytest.mark.parametrize("case", list(_varlen_cases()))
def test_varlen_argument_errors(case, monkeypatch):
    module = __import__("warpspec.ops.attention_varlen", fromlist=["launch"])
    monkeypatch.setattr(module, "launch", lambda *args, **kwargs: pytest.fail("ran before the checks"))
    args, kwargs, message = _varlen_cases()[case]
    with pytest.raises(ArgumentError) as raised:
        attention_varlen(*args, **kwargs)
    assert message in str(raised.value)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [16, 64])
def test_gpu_paged_matches_each_sequence_dense(page_size):
    q, k_cache, v_cache, table, seq_lens = (torch.from_numpy(x).cuda() for x in
                                            paged_operands([300, 1000, 77], 4, page_size=page_size))
    with warpspec.use_backend("cuda"):
        out = attention_paged(q, k_cache, v_cache, table, seq_lens, causal=True)
    torch.cuda.synchronize()
    for b, length in enumerate(seq_lens.tolist()):
        keys = k_cache[table[b].long()].reshape(-1, 2, 64)[:length]
        values = v_cache[table[b].long()].reshape(-1, 2, 64)[:length]
        want = torch.nn.functional.scaled_dot_product_attention(
            q[b].float().transpose(0, 1)[None], keys.float().transpose(0, 1)[None],
            values.float().transpose(0, 1)[None], attn_mask=causal_lower_right(4, length), enable_gqa=True)[0]
        assert (out[b].float() - want.transpose(0, 1)).abs().max().item() < 2e-3


@pytest.mark.gpu
@pytest.mark.parametrize("seq_q, head_dim, page_size", [(20, 128, 64), (20, 64, 16), (1, 256, 64), (4, 128, 16)])
def test_gpu_paged_never_reads_unwritten_slots(seq_q, head_dim, page_size):
    """NaN in every cache slot past each sequence's keys, on the GPU: the prefill kernel (S_q 20) and the decode
    kernel (S_q 1 and 4, D 256 among them) move the load holding a sequence's last key back to end at it, so the
    outputs are finite and match float32 SDPA on each sequence's gathered keys."""
    arrays = paged_operands([300, 1000, 77, 129], seq_q, page_size=page_size, head_dim=head_dim)
    q, k_cache, v_cache, table, seq_lens = arrays
    for cache in (k_cache, v_cache):
        fill_unwritten_slots(cache, table, seq_lens)
    q, k_cache, v_cache, table, seq_lens = (torch.from_numpy(x).cuda() for x in (q, k_cache, v_cache, table, seq_lens))
    with warpspec.use_backend("cuda"):
        out = attention_paged(q, k_cache, v_cache, table, seq_lens, causal=True)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all().item()
    for b, length in enumerate(seq_lens.tolist()):
        keys = k_cache[table[b].long()].reshape(-1, 2, head_dim)[:length]
        values = v_cache[table[b].long()].reshape(-1, 2, head_dim)[:length]
        want = torch.nn.functional.scaled_dot_product_attention(
            q[b].float().transpose(0, 1)[None], keys.float().transpose(0, 1)[None],
            values.float().transpose(0, 1)[None], attn_mask=causal_lower_right(seq_q, length), enable_gqa=True)[0]
        assert (out[b].float() - want.transpose(0, 1)).abs().max().item() < 2e-3


def test_planted_bug_a_page_looked_up_past_the_table_is_caught_at_its_line():
    """The bug kernel reads block_table[b, page + 1]: for a sequence that fills its table, a BoundsError at the
    lookup's line."""
    from tests.kernels import attention_bug_kernels as bk
    from warpspec.ops.attention_kernel import LOG2_E

    q, k_cache, v_cache, table, _ = paged_operands([40], 2, page_size=16)
    seq_lens = np.array([table.shape[1] * 16], np.int32)
    batch, seq_q, heads, head_dim = q.shape
    out, lse = np.empty_like(q), np.empty((heads, batch * seq_q), np.float32)
    kernel = bk.ReadsTheNextPage(float16, head_dim=head_dim, causal=True, page_size=16, block_n=16, num_stages=2, unroll=1)
    with pytest.raises(warpspec.BoundsError) as raised:
        kernel(batch, seq_q, k_cache.shape[0], table.shape[1], heads, 2, head_dim ** -0.5 * LOG2_E, table, seq_lens,
               q, k_cache, v_cache, out, lse)
    assert f"load_scalar: index [0, {table.shape[1]}] is outside table [1, {table.shape[1]}]" in str(raised.value)
    assert raised.value.location.rsplit(" at ", 1)[-1] == f"{bk.__file__}:{bk.marker_line('next-page')}"


def test_planted_bug_a_page_read_before_its_load_completes_is_caught_at_its_line():
    """The bug kernel's producer arrives on a K stage without announcing the page's bytes: the stage's phase
    completes before the page lands, and the consumer's QK WGMMA reads it. A RaceError at that read, naming the
    arrival that should have announced the bytes."""
    from tests.kernels import attention_bug_kernels as bk
    from warpspec.ops.attention_kernel import LOG2_E

    q, k_cache, v_cache, table, seq_lens = paged_operands([40], 2, page_size=16)
    batch, seq_q, heads, head_dim = q.shape
    out, lse = np.empty_like(q), np.empty((heads, batch * seq_q), np.float32)
    kernel = bk.ReadsAPageBeforeItLands(float16, head_dim=head_dim, causal=True, page_size=16, block_n=16,
                                        num_stages=2, unroll=1)
    with pytest.raises(warpspec.RaceError) as raised:
        kernel(batch, seq_q, k_cache.shape[0], table.shape[1], heads, 2, head_dim ** -0.5 * LOG2_E, table, seq_lens,
               q, k_cache, v_cache, out, lse)
    message = str(raised.value).splitlines()[0]
    from warpspec.ops import attention_kernel

    frames, read_at = raised.value.location.rsplit(" at ", 1)  # the innermost frame: the consumer's QK WGMMA
    assert frames.endswith("-> Attention.consume_tile") and read_at.startswith(f"{attention_kernel.__file__}:")
    assert "wgmma.mma operand b reads sk[0, 0], which holds elements that no completed write has filled" in message
    assert f"ReadsAPageBeforeItLands.load_stage at {bk.__file__}:{bk.marker_line('no-expect-tx')}), so the copy, " \
           f"issued after, completes full_barriers[0]'s current phase 1" in message


def test_the_paged_kernel_builds_without_spills():
    """NVRTC compiles the paged kernel (causal, bf16) at pages of 16 and 256 rows for D 128, and 128 for D 256,
    with no spills, no stack and no ptxas advisory."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble, parse_ptxas_log
    from warpspec.ops.attention import DEFAULT_SCHEDULES
    from warpspec.ops.attention_paged import key_tile
    from warpspec.ops.attention_paged_kernel import AttentionPaged
    from warpspec.runtime import kernel_for

    for head_dim, page_size in ((128, 16), (128, 256), (256, 128)):
        schedule = dict(DEFAULT_SCHEDULES[head_dim], block_n=key_tile(head_dim, page_size))
        kernel = AttentionPaged(bfloat16, head_dim=head_dim, causal=True, page_size=page_size, **schedule)
        built = compile_kernel(kernel_for(kernel, {}))
        (report,) = parse_ptxas_log(built.module.log).values()
        assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == \
            (0, 0, 0, ())
        counts = count_instructions(disassemble(built.module.cubin), ["HGMMA", "LDG", "LDL", "STL"])
        assert counts["HGMMA"] > 0 and counts["LDG"] >= 2 and counts["LDL"] == counts["STL"] == 0


def _paged_cases():
    q, k_cache, v_cache, table, seq_lens = paged_operands([37, 100], 2, page_size=16)
    bad_page = table.copy()
    bad_page[1, 3] = k_cache.shape[0]
    return {
        "page-out-of-range": ((q, k_cache, v_cache, bad_page, seq_lens), {},
                              f"block_table[1, 3] is {k_cache.shape[0]}: a page index must lie in "
                              f"[0, {k_cache.shape[0]})"),
        "capacity": ((q, k_cache, v_cache, table, np.array([37, 200], np.int32)), {},
                     "seq_lens[1] is 200, above the table's capacity max_pages * page_size = 8 * 16 = 128"),
        "too-short": ((q, k_cache, v_cache, table, np.array([1, 100], np.int32)), {},
                      "seq_lens[0] is 1; it counts the sequence's keys, the 2 new tokens included"),
        "page-size": ((q, k_cache[:, :8].copy(), v_cache[:, :8].copy(), table, seq_lens), {},
                      "page_size (k_cache.shape[1]) is 8; attention_paged takes 16 to 256"),
        "page-multiple": (paged_operands([37, 100], 2, page_size=24)[:3] + (table, seq_lens), {},
                          "page_size (k_cache.shape[1]) is 24; attention_paged takes 16 to 256, a multiple of 16"),
        "negative-page": ((q, k_cache, v_cache, np.where(np.arange(8) == 2, -1, table).astype(np.int32), seq_lens),
                          {}, "block_table[0, 2] is -1: a page index must lie in"),
        "table-strided": ((q, k_cache, v_cache, np.repeat(table, 2, axis=1)[:, ::2], seq_lens), {},
                          "block_table must be contiguous (the kernel reads it as a dense array)"),
        "lens-strided": ((q, k_cache, v_cache, table, np.repeat(seq_lens, 2)[::2]), {},
                         "seq_lens must be contiguous (the kernel reads it as a dense array)"),
        "cache-strided": ((q, k_cache, np.repeat(v_cache, 2, axis=3)[..., ::2], table, seq_lens), {},
                          "v_cache must be contiguous (a copy per call would be the whole cache)"),
        "table-dtype": ((q, k_cache, v_cache, table.astype(np.int64), seq_lens), {},
                        "block_table must be a 2-D int32 array"),
        "batch": ((q, k_cache, v_cache, table[:1], seq_lens), {}, "block_table has 1 rows and seq_lens 2 entries"),
        "no-pages": ((q, k_cache[:0], v_cache[:0], table, seq_lens), {},
                     "k_cache has no pages (k_cache.shape[0] is 0)"),
        "mixed-device": ((torch.from_numpy(q), torch.from_numpy(k_cache), torch.from_numpy(v_cache),
                          torch.from_numpy(table), torch.zeros(2, dtype=torch.int32, device="meta")), {},
                         "seq_lens is on meta but q is on cpu"),
    }


@pytest.mark.parametrize("case", list(_paged_cases()))
def test_paged_argument_errors(case, monkeypatch):
    module = importlib.import_module("warpspec.ops.attention_paged")
    monkeypatch.setattr(module, "attention", lambda *args, **kwargs: pytest.fail("ran before the checks"))
    monkeypatch.setattr(module, "launch", lambda *args, **kwargs: pytest.fail("ran before the checks"))
    args, kwargs, message = _paged_cases()[case]
    with pytest.raises(ArgumentError) as raised:
        attention_paged(*args, **kwargs)
    assert message in str(raised.value)


def test_paged_takes_a_strided_q_from_a_contiguous_copy():
    """A q that is a slice of wider rows (as of a fused projection) gives what its contiguous copy gives; before,
    an ArgumentError asked for a contiguous q."""
    q, k_cache, v_cache, table, seq_lens = paged_operands([37, 50], 2, page_size=16)
    wide = np.concatenate([q, q], axis=3)[..., :q.shape[3]]
    assert not wide.flags.c_contiguous
    assert np.array_equal(attention_paged(wide, k_cache, v_cache, table, seq_lens),
                          attention_paged(q, k_cache, v_cache, table, seq_lens))


@pytest.mark.parametrize("seq_q", [1, 3])
def test_paged_with_an_empty_batch_is_an_empty_result(seq_q, monkeypatch):
    """An empty batch indexed its first sequence during validation (a raw IndexError)."""
    module = importlib.import_module("warpspec.ops.attention_paged")
    monkeypatch.setattr(module, "launch", lambda *args, **kwargs: pytest.fail("an empty batch launched"))
    q, k_cache, v_cache, table, seq_lens = paged_operands([37, 100], seq_q, page_size=16)
    out = attention_paged(q[:0], k_cache, v_cache, table[:0], seq_lens[:0])
    assert out.shape == (0, seq_q) + q.shape[2:]
    tq = torch.from_numpy(q[:0]).requires_grad_()
    tout = attention_paged(tq, *(torch.from_numpy(x) for x in (k_cache, v_cache, table[:0], seq_lens[:0])))
    tout.float().sum().backward()
    assert tq.grad.shape == tq.shape


def test_paged_checks_the_table_at_every_call_and_ignores_entries_past_each_sequence(monkeypatch):
    """The first call of a description caches its shape checks; the table's and the lengths' values are checked
    at every call: a call like an earlier valid one, with a page index out of range, is refused. Entries past a
    sequence's last page (padding, here -1) are never read, so they are not checked."""
    module = importlib.import_module("warpspec.ops.attention_paged")
    launched = []
    monkeypatch.setattr(module, "launch", lambda *args, **kwargs: launched.append(args[3].copy()))
    q, k_cache, v_cache, table, seq_lens = paged_operands([37, 100], 2, page_size=16)
    padded = table.copy()
    padded[0, 3:] = -1  # sequence 0 has 37 keys: 3 pages of 16
    module.attention_paged(q, k_cache, v_cache, padded, seq_lens)
    assert len(launched) == 1 and (launched[0] == padded).all()
    bad = padded.copy()
    bad[0, 2] = -1
    with pytest.raises(ArgumentError, match=r"block_table\[0, 2\] is -1: a page index must lie in \[0, "):
        module.attention_paged(q, k_cache, v_cache, bad, seq_lens)
    with pytest.raises(ArgumentError, match=r"seq_lens\[0\] is 49, above|block_table\[0, 3\] is -1"):
        module.attention_paged(q, k_cache, v_cache, padded, np.array([49, 100], np.int32))
    assert len(launched) == 1


def test_paged_check_must_be_a_bool():
    q, k_cache, v_cache, table, seq_lens = paged_operands([37, 100], 2, page_size=16)
    with pytest.raises(ArgumentError, match="check must be True or False, got 1"):
        attention_paged(q, k_cache, v_cache, table, seq_lens, check=1)


@pytest.mark.parametrize("seq_q, page_size", [(1, 16), (3, 64), (20, 16)])
def test_unchecked_bad_values_stay_inside_the_caches(seq_q, page_size, monkeypatch):
    """``check=False`` reads nothing back, and the kernels (the decode kernel at S_q <= 16, the paged kernel above)
    keep bad values inside the caches and the table: a page index past the cache or negative reads as a page of
    zeros, and a length above the table's capacity is clamped to it. The emulator would raise a BoundsError for
    any read outside the table's row, so a pass also shows that no lookup left it."""
    module = importlib.import_module("warpspec.ops.attention_paged")
    monkeypatch.setattr(module, "check_contents", lambda *args: pytest.fail("check=False read the values"))
    q, k_cache, v_cache, table, seq_lens = paged_operands([70, 100], seq_q, page_size=page_size)
    capacity = table.shape[1] * page_size
    bad = table.copy()
    bad[0, 0] = 2 ** 31 - 1  # past the cache, and a row offset that would overflow unclamped
    bad[1, 1] = -7
    lengths = np.array([70, capacity + 1000], np.int32)
    out = attention_paged(q, k_cache, v_cache, bad, lengths, causal=False, check=False)
    for b, length in enumerate([70, capacity]):
        pages = table[b][:-(-length // page_size)]
        keys, values = (x[pages].reshape(-1, 2, 64)[:length].copy() for x in (k_cache, v_cache))
        zeroed = 0 if b == 0 else 1  # the page each sequence's bad entry names
        keys[zeroed * page_size:(zeroed + 1) * page_size] = 0
        values[zeroed * page_size:(zeroed + 1) * page_size] = 0
        want = expected(heads_first(q[b]), heads_first(keys), heads_first(values), False)[0]
        assert np.abs(out[b].astype(np.float32) - want.transpose(1, 0, 2)).max() < 2e-3


def test_paged_under_torch_compile_checks_the_values_when_the_graph_runs():
    """torch.compile (aot_eager, CPU tensors on the emulator): checked and unchecked calls match the eager result,
    and a bad page index is still an ArgumentError (the check runs eagerly, outside the traced graph)."""
    torch._dynamo.reset()
    operands = [torch.from_numpy(x) for x in paged_operands([37, 50], 1, page_size=16)]
    want = attention_paged(*operands)
    for check in (True, False):
        compiled = torch.compile(lambda *args, check=check: attention_paged(*args, check=check), backend="aot_eager")
        assert torch.equal(compiled(*operands), want)
    bad = operands[3].clone()
    bad[1, 0] = 1000
    with pytest.raises(ArgumentError, match=r"block_table\[1, 0\] is 1000: a page index must lie in"):
        compiled = torch.compile(lambda *args: attention_paged(*args), backend="aot_eager")
        compiled(*operands[:3], bad, operands[4])


def test_varlen_unchecked_takes_the_grid_from_max_seqlen_q_and_reads_nothing_back(monkeypatch):
    """``check=False`` with ``max_seqlen_q``: the same result as the checked call, and the lengths are never read
    on the host (their reader is made to fail)."""
    module = importlib.import_module("warpspec.ops.attention_varlen")
    q, k, v, cu_q, cu_k = packed([10, 37, 5], [12, 37, 70])
    want = attention_varlen(q, k, v, cu_q, cu_k, causal=True)
    monkeypatch.setattr(module, "offsets", lambda *args: pytest.fail("check=False read the lengths"))
    got = attention_varlen(q, k, v, cu_q, cu_k, causal=True, max_seqlen_q=37, check=False)
    np.testing.assert_array_equal(got, want)


def test_varlen_unchecked_bad_lengths_stay_inside_the_arrays():
    """Unchecked cumulative lengths that go negative, stand still or run past the totals: the kernel clamps each
    sequence's bounds into [0, total] in order, so every sequence is its clamped rows (the emulator raises on any
    access outside the views, so a pass also shows none was made)."""
    q, k, v, cu_q, cu_k = packed([10, 20, 6], [12, 20, 8])
    bad_q = np.array([-3, 10, 10, 99], np.int32)  # sequence 0 is rows 0-9, 1 is empty, 2 is rows 10-35
    bad_k = np.array([-4, 12, 32, 99], np.int32)  # sequence 0 is keys 0-11, sequence 2 keys 32-39
    out = attention_varlen(q, k, v, bad_q, bad_k, causal=False, max_seqlen_q=32, check=False)
    for rows, keys in ((slice(0, 10), slice(0, 12)), (slice(10, 36), slice(32, 40))):
        want = expected(heads_first(q[rows]), heads_first(k[keys]), heads_first(v[keys]), False)[0]
        assert np.abs(out[rows].astype(np.float32) - want.transpose(1, 0, 2)).max() < 2e-3


def test_varlen_max_seqlen_q_is_checked():
    q, k, v, cu_q, cu_k = packed([10, 37, 5], [12, 37, 70])
    with pytest.raises(ArgumentError, match="max_seqlen_q is 36, but sequence 1 has 37 query rows"):
        attention_varlen(q, k, v, cu_q, cu_k, max_seqlen_q=36)
    with pytest.raises(ArgumentError, match=r"check=False reads nothing back, so max_seqlen_q \(the longest"):
        attention_varlen(q, k, v, cu_q, cu_k, check=False)
    with pytest.raises(ArgumentError, match="max_seqlen_q must be a non-negative int .*, got 3.0"):
        attention_varlen(q, k, v, cu_q, cu_k, max_seqlen_q=3.0)
    with pytest.raises(ArgumentError, match="check must be True or False, got None"):
        attention_varlen(q, k, v, cu_q, cu_k, check=None)
