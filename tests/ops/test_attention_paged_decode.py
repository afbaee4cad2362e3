"""ops.attention_paged's split-KV decode path (warpspec.ops.attention_decode_kernel.DecodePaged): few query rows
against a paged cache run on the decode kernel, packed heads and split keys, and match each sequence's dense result
on the emulator (pages of 16 to 64 rows, a table far larger than the sequences, a sequence of one key, both causal
modes); the planted bug of a page looked up past the table, caught at its line; the NVRTC build; and on a Hopper GPU
against a float32 reference at decode's sizes."""

import importlib

import numpy as np
import pytest

from tests.kernels import attention_bug_kernels as bk
from tests.ops.test_attention import expected
from tests.support.paged import fill_unwritten_slots

import warpspec
from warpspec.dtypes import bfloat16, float16
from warpspec.ops import attention_decode, attention_paged
from warpspec.ops.attention import Problem
from warpspec.ops.attention_decode_kernel import DecodePaged
from warpspec.ops.attention_kernel import LOG2_E, WARPGROUP


def heads_first(x):
    return np.ascontiguousarray(x.transpose(1, 0, 2))[None]


def cache(seq_lens, seq_q, page_size, heads, kv_heads, head_dim, spare_pages=0, seed=0, dtype=np.float16):
    """A cache whose pages are dealt to the sequences in a random order, a table with ``spare_pages`` unused
    entries per sequence beyond the longest, and q [B, S_q, H, D]."""
    rng = np.random.default_rng(seed)
    max_pages = max(-(-n // page_size) for n in seq_lens) + spare_pages
    num_pages = len(seq_lens) * max_pages + 3
    k_cache, v_cache = (rng.standard_normal((num_pages, page_size, kv_heads, head_dim)).astype(dtype)
                        for _ in range(2))
    table = rng.permutation(num_pages).astype(np.int32)[:len(seq_lens) * max_pages].reshape(len(seq_lens), -1)
    q = rng.standard_normal((len(seq_lens), seq_q, heads, head_dim)).astype(dtype)
    return q, k_cache, v_cache, np.ascontiguousarray(table), np.array(seq_lens, np.int32)


def dense_keys(x_cache, pages, length):
    """A sequence's keys (or values) gathered from its pages, [S_k, H_kv, D]."""
    return x_cache[pages].reshape(-1, *x_cache.shape[2:])[:length]


@pytest.mark.parametrize("seq_q, causal, page_size, head_dim", [(1, True, 16, 64), (1, False, 64, 128),
                                                                 (4, True, 32, 64), (3, False, 16, 128),
                                                                 (2, True, 64, 256)])
def test_paged_decode_runs_the_split_kernel_and_matches_each_sequence_dense(seq_q, causal, page_size, head_dim,
                                                                             monkeypatch):
    """8 query heads over 2 K/V heads (packs of 4), a table with 6 spare pages per sequence, sequences of 3 to 700
    keys: one launch of the decode kernel, split, against each sequence's keys gathered from its pages."""
    module = importlib.import_module("warpspec.ops.attention_paged")
    launches = []
    real = module.launch_decode_paged
    monkeypatch.setattr(module, "launch_decode_paged", lambda *args: launches.append(args[-1]) or real(*args))
    q, k_cache, v_cache, table, seq_lens = cache([700, max(seq_q, 3), 150], seq_q, page_size, 8, 2, head_dim,
                                                 spare_pages=6)
    with warpspec.use_backend("emulator"):
        out = attention_paged(q, k_cache, v_cache, table, seq_lens, causal=causal)
    (problem,) = launches
    assert attention_decode.pack_size(problem) == 4 and attention_decode.split_count(problem) > 1
    assert out.shape == q.shape and out.dtype == q.dtype
    for b, length in enumerate(seq_lens):
        keys, values = (dense_keys(x, table[b], length) for x in (k_cache, v_cache))
        want = expected(heads_first(q[b]), heads_first(keys), heads_first(values), causal)[0]
        assert np.abs(out[b].astype(np.float32) - want.transpose(1, 0, 2)).max() < 2e-3


def test_a_sequence_of_one_key_in_a_table_of_many_pages():
    """Decode's first step: one key, the table's other entries unused; every split but the first has no key."""
    q, k_cache, v_cache, table, seq_lens = cache([1, 40], 1, 16, 4, 1, 64, spare_pages=8)
    with warpspec.use_backend("emulator"):
        out = attention_paged(q, k_cache, v_cache, table, seq_lens, causal=True)
    for b, length in enumerate(seq_lens):
        keys, values = (dense_keys(x, table[b], length) for x in (k_cache, v_cache))
        want = expected(heads_first(q[b]), heads_first(keys), heads_first(values), True)[0]
        assert np.abs(out[b].astype(np.float32) - want.transpose(1, 0, 2)).max() < 2e-3


def test_planted_bug_a_decode_page_looked_up_past_the_table_is_caught_at_its_line():
    """The bug kernel reads block_table[b, page + 1]: for a sequence that fills its table, a BoundsError at the
    lookup's line."""
    q, k_cache, v_cache, table, _ = cache([40], 1, 16, 2, 1, 64)
    seq_lens = np.array([table.shape[1] * 16], np.int32)
    problem = Problem(1, 2, 1, 1, int(seq_lens[0]), 64, float16, True, 0.125)
    splits = attention_decode.split_count(problem)
    elements = attention_decode.partial_elements(problem, splits)
    kernel = bk.ReadsTheNextPageInDecode(float16, head_dim=64, causal=True, block_n=16, num_stages=2, pack=2,
                                         page_size=16)
    with warpspec.use_backend("emulator"), pytest.raises(warpspec.BoundsError) as raised:
        kernel(1, 1, k_cache.shape[0], table.shape[1], 2, 2, 0.125 * LOG2_E, splits, table, seq_lens, q, k_cache,
               v_cache, np.empty_like(q), np.empty(2, np.float32), np.zeros(elements // 65 * 64, np.float32),
               np.zeros(elements // 65, np.float32), np.zeros(1, np.int32))
    assert f"load_scalar: index [0, {table.shape[1]}] is outside table [1, {table.shape[1]}]" in str(raised.value)
    assert raised.value.location.rsplit(" at ", 1)[-1] == f"{bk.__file__}:{bk.marker_line('decode-next-page')}"


@pytest.mark.parametrize("page_size", [16, 64])
def test_nvrtc_builds_the_paged_decode_kernel_without_spills(page_size):
    """bf16, causal, D 128, packs of 4: no spills, no stack, and registers for two blocks per SM."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble, parse_ptxas_log
    from warpspec.ops.attention_decode_kernel import DecodePaged
    from warpspec.runtime import kernel_for

    kernel = DecodePaged(bfloat16, head_dim=128, causal=True, pack=4, page_size=page_size,
                         **attention_decode.paged_schedule(128))
    built = compile_kernel(kernel_for(kernel, {}))
    (report,) = parse_ptxas_log(built.module.log).values()
    assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == (0, 0, 0, ())
    assert report.registers <= 65536 // (2 * (WARPGROUP + 32)) // 8 * 8
    counts = count_instructions(disassemble(built.module.cubin), ["HGMMA", "LDL", "STL"])
    assert counts["HGMMA"] > 0 and counts["LDL"] == counts["STL"] == 0


def test_paged_decode_loads_16_keys_at_a_time_in_the_dense_schedule():
    """The dense decode schedule at every page size; a load is 16 keys, so it lies in one page of any size the op
    takes; other page sizes and tiles are refused by the kernel's constructor."""
    assert attention_decode.paged_schedule(128) == attention_decode.DEFAULT_DECODE_SCHEDULES[128]
    kernel = DecodePaged(bfloat16, head_dim=128, causal=True, pack=4, page_size=48, **attention_decode.paged_schedule(128))
    assert (kernel.block_n, kernel.sub_n) == (64, 16)
    with pytest.raises(warpspec.ArgumentError, match="page_size must be a positive multiple of 16 .*; got 24"):
        DecodePaged(bfloat16, head_dim=128, causal=True, block_n=64, num_stages=2, page_size=24)
    with pytest.raises(warpspec.ArgumentError, match="block_n must be a multiple of 16 .*; got 40"):
        DecodePaged(bfloat16, head_dim=128, causal=True, block_n=40, num_stages=2, page_size=16)


@pytest.mark.parametrize("seq_q, page_size, head_dim", [(1, 16, 128), (2, 48, 128), (1, 64, 128), (3, 32, 256)])
def test_unwritten_slots_past_each_sequence_never_reach_the_output(seq_q, page_size, head_dim):
    """Every cache slot past a sequence's keys holds NaN (memory nobody wrote: the last page's tail and the unused
    pages): their probabilities are 0, but 0 · NaN would be NaN, so the load that holds a sequence's last key is
    moved back to end at it and no such slot is read. The outputs are finite and match each sequence's dense
    result, at every head dim."""
    q, k_cache, v_cache, table, seq_lens = cache([70, 100, 33], seq_q, page_size, 8, 2, head_dim, spare_pages=2)
    for x in (k_cache, v_cache):
        fill_unwritten_slots(x, table, seq_lens)
    with warpspec.use_backend("emulator"):
        out = attention_paged(q, k_cache, v_cache, table, seq_lens, causal=True)
    assert np.isfinite(out.astype(np.float32)).all()
    for b, length in enumerate(seq_lens):
        keys, values = (dense_keys(x, table[b], length) for x in (k_cache, v_cache))
        want = expected(heads_first(q[b]), heads_first(keys), heads_first(values), True)[0]
        assert np.abs(out[b].astype(np.float32) - want.transpose(1, 0, 2)).max() < 2e-3


@pytest.mark.gpu
@pytest.mark.parametrize("seq_q", [1, 4])
@pytest.mark.parametrize("page_size", [16, 64])
def test_gpu_paged_decode_against_a_float32_reference(seq_q, page_size):
    """32 query / 8 K/V heads, D 128, bf16, sequences of 1 to 9000 keys in a table of room for 16384: each sequence
    against SDPA in float32 on its gathered keys; twice (the flags given back)."""
    torch = pytest.importorskip("torch")
    from tests.ops.test_attention_gpu import TOLERANCE, reference

    capacity = 16384 // page_size  # pages of room per sequence
    arrays = cache([9000, seq_q, 4097], seq_q, page_size, 32, 8, 128, spare_pages=capacity - -(-9000 // page_size))
    q, k_cache, v_cache = (torch.from_numpy(x).cuda().to(torch.bfloat16) for x in arrays[:3])
    table, seq_lens = (torch.from_numpy(x).cuda() for x in arrays[3:])
    assert table.shape[1] == capacity
    for _ in range(2):
        out = attention_paged(q, k_cache, v_cache, table, seq_lens, causal=True)
        for b, length in enumerate(seq_lens.tolist()):
            keys, values = (x[table[b].long()].reshape(-1, 8, 128)[:length].transpose(0, 1)[None]
                            for x in (k_cache, v_cache))
            want = reference(q[b].transpose(0, 1)[None], keys, values, True)[0]
            assert (out[b].float() - want.transpose(0, 1)).abs().max().item() < TOLERANCE[torch.bfloat16]


@pytest.mark.gpu
@pytest.mark.parametrize("seq_q", [1, 4])
def test_gpu_unchecked_decode_binds_its_launch_and_is_captured_in_a_cuda_graph(seq_q, monkeypatch):
    """``check=False`` at S_q = 1 and 4 (q and the output copied head-major around the bound launch): the second
    call of a description takes its bound launch (the general launch is made to fail, and the result is still
    right for new q values); a CUDA graph captures the call and its
    replays follow new contents of q, the table and the lengths; ``check=True`` inside capture is refused, naming
    check=False, before anything is captured."""
    torch = pytest.importorskip("torch")
    from tests.ops.test_attention_gpu import TOLERANCE, reference

    module = importlib.import_module("warpspec.ops.attention_paged")
    arrays = cache([3000, 4, 700], seq_q, 16, 32, 8, 128, spare_pages=4, seed=3)
    q, k_cache, v_cache = (torch.from_numpy(x).cuda().to(torch.bfloat16) for x in arrays[:3])
    table, seq_lens = (torch.from_numpy(x).cuda() for x in arrays[3:])

    def check(out):
        assert out.shape == q.shape and out.is_contiguous()
        for b, length in enumerate(seq_lens.tolist()):
            keys, values = (x[table[b].long()].reshape(-1, 8, 128)[:length].transpose(0, 1)[None]
                            for x in (k_cache, v_cache))
            want = reference(q[b].transpose(0, 1)[None], keys, values, True)[0]
            assert (out[b].float() - want.transpose(0, 1)).abs().max().item() < TOLERANCE[torch.bfloat16]

    check(attention_paged(q, k_cache, v_cache, table, seq_lens, check=False))
    general = module.launch
    monkeypatch.setattr(module, "launch", lambda *args: pytest.fail("a bound call took the general launch"))
    q.copy_(torch.randn_like(q))
    check(attention_paged(q, k_cache, v_cache, table, seq_lens, check=False))
    monkeypatch.setattr(module, "launch", general)
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        attention_paged(q, k_cache, v_cache, table, seq_lens, check=False)  # warm on the side stream
        with torch.cuda.graph(graph, stream=stream):
            with pytest.raises(warpspec.ArgumentError, match="inside CUDA graph capture .*; pass check=False"):
                attention_paged(q, k_cache, v_cache, table, seq_lens)
            out = attention_paged(q, k_cache, v_cache, table, seq_lens, check=False)
    torch.cuda.current_stream().wait_stream(stream)
    for step in range(2):
        q.copy_(torch.randn_like(q))
        seq_lens.copy_(torch.tensor([2000 + step, 4 + step, 701], dtype=torch.int32))
        table.copy_(table[torch.tensor([2, 0, 1], device="cuda")] if step else table)
        graph.replay()
        torch.cuda.synchronize()
        check(out)


@pytest.mark.parametrize("seq_q", [1, 2])
def test_the_bound_decode_launch_passes_what_the_general_launch_passed(seq_q, monkeypatch):
    """``PagedCall.bind`` (CPU tensors, the bound launch faked): a later call passes the table, lengths, q, caches
    and its new output at their addresses (at S_q = 2, head-major copies of q and of the output, which the result
    is the transpose of), and the workspace's O and log-sum-exp partials at the offsets the general launch gave
    them (O first, the log-sum-exp right after it), with its flags."""
    torch = pytest.importorskip("torch")
    module = importlib.import_module("warpspec.ops.attention_paged")
    arrays = [torch.from_numpy(x) for x in cache([70, 33], seq_q, 16, 8, 2, 64)]
    q, k_cache, v_cache, table, seq_lens = arrays
    found = module.call_for(q, k_cache, v_cache, table, seq_lens, True, None)
    out = torch.empty_like(q)
    with warpspec.use_backend("emulator"):
        script, args = module.launch(q, k_cache, v_cache, table, seq_lens, out, True, found.row.scale)
    ws_o, ws_lse, flags = args[-3:]
    calls, allocated = [], []

    def empty(*args, **kwargs):  # torch.empty, keeping what direct allocates
        allocated.append(torch.empty(*args, **kwargs))
        return allocated[-1]

    def bound(*addresses, stream):  # the kernel's effect on a head-major output: its address read back
        calls.append(addresses)
        heads_out = next(t for t in allocated if t.data_ptr() == addresses[5])
        heads_out.copy_(torch.arange(heads_out.numel()).reshape(heads_out.shape))

    monkeypatch.setattr(module, "bound_launcher", lambda launched: (bound, lambda: False, lambda index: 0, empty))
    workspace = (torch.zeros(ws_o.numel() + ws_lse.numel() + 100), torch.zeros(flags.numel(), dtype=torch.int32))
    monkeypatch.setattr(module, "stream_workspace", lambda *args: workspace)
    found.bind(out, (script, args))
    result = found.direct(q, k_cache, v_cache, table, seq_lens)
    (addresses,) = calls
    base = workspace[0].data_ptr()
    assert addresses[:2] + addresses[3:5] == (table.data_ptr(), seq_lens.data_ptr(), k_cache.data_ptr(),
                                              v_cache.data_ptr())
    assert addresses[7:] == (base, base + 4 * ws_o.numel(), workspace[1].data_ptr())
    assert ws_lse.numel() == ws_o.numel() // 64 and result.shape == q.shape and result.is_contiguous()
    heads_shape = (q.shape[0], q.shape[2], seq_q, q.shape[3])
    written = torch.arange(q.numel()).reshape(heads_shape).transpose(1, 2).to(result.dtype)
    assert torch.equal(result, written)  # the head-major output, transposed back
    if seq_q == 1:  # q's and the output's own memory
        assert (addresses[2], addresses[5]) == (q.data_ptr(), result.data_ptr())
    else:  # a head-major copy of q (the GPU twin checks what it holds)
        assert addresses[2] != q.data_ptr()


def _planted_decode(kernel_class):
    """Run a planted paged decode kernel (D 64, pages of 16 in 64-key tiles) over one sequence of 70 keys."""
    q, k_cache, v_cache, table, seq_lens = cache([70], 1, 16, 2, 1, 64)
    problem = Problem(1, 2, 1, 1, table.shape[1] * 16, 64, float16, True, 0.125)
    splits = attention_decode.split_count(problem)
    elements = attention_decode.partial_elements(problem, splits)
    kernel = kernel_class(float16, head_dim=64, causal=True, block_n=64, num_stages=2, pack=2, page_size=16)
    with warpspec.use_backend("emulator"), pytest.raises(warpspec.RaceError) as raised:
        kernel(1, 1, k_cache.shape[0], table.shape[1], 2, 2, 0.125 * LOG2_E, splits, table, seq_lens, q, k_cache,
               v_cache, np.empty_like(q), np.empty(2, np.float32), np.zeros(elements // 65 * 64, np.float32),
               np.zeros(elements // 65, np.float32), np.zeros(1, np.int32))
    return str(raised.value).splitlines()[0], raised.value.location


def test_planted_bug_a_tile_announcing_one_page_of_four_is_caught_with_the_copy_s_line():
    """The producer announces the bytes of a tile's first 16-key load alone: the stage's phase completes when that
    load lands, and the consumer's QKᵀ reads the second load before it lands. A RaceError at the read, naming the
    copy's line and that its phase completed before it landed (not a wrong parity)."""
    from warpspec.ops import attention_decode_kernel

    message, location = _planted_decode(bk.AnnouncesOnePageOfFour)
    assert location.rsplit(" at ", 1)[-1].startswith(f"{attention_decode_kernel.__file__}:")
    assert "wgmma.mma operand b reads sk[0, 1, 0], which holds elements that no completed write has filled" in message
    assert f"AnnouncesOnePageOfFour.load_tile at {bk.__file__}:{bk.marker_line('one-page-of-four')}) was issued in " \
           f"phase 0 of full_barriers[0], which completed before the copy landed" in message
    assert "wrong phase" not in message
