"""The packed backward of ops.attention_varlen on the emulator (CPU tensors through autograd): each sequence's
gradients against torch autograd on that sequence alone (``test_attention_backward.reference``, float32) at ragged
lengths (a 1-row sequence, one past a 128-row tile, one without queries, one without keys, causal rows that see no
key), grouped-query heads, D 64 and 128, fp16 and bf16, both dQ paths; one launch of each kernel and no length read
on the host; both passes in one torch.compile graph; random interleavings of the kernels' partitions; the errors;
planted dK/dV kernels without the cross-sequence mask (dK and dV far off) and with a TMA store past a sequence's
end (a RaceError at the store); the NVRTC build of every packed kernel (no spills, no stack, no ptxas advisory); and
benchmarks/attention_varlen.py's ``--backward --dry-run``."""

import ast
import importlib

import ml_dtypes
import numpy as np
import pytest

from tests.ops.test_attention_backward import GRADIENT_TOLERANCE, reference, relative_error
from tests.support.example_checks import emulator  # noqa: F401  (autouse: the emulator, its deterministic schedule)
from warpspec import ArgumentError, bfloat16
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.ops import attention_varlen

torch = pytest.importorskip("torch")

VARLEN = importlib.import_module("warpspec.ops.attention_varlen")
#: Query and key rows per sequence: a 1-row sequence, one past a 128-row tile (causal: its first 10 rows see no
#: key), one without queries, one without keys. Packed, every tile that passes a sequence's end holds the next
#: sequence's rows: the first sequence's last 64-row query tile holds the next two sequences' first 28 rows, whose
#: lse is finite, and lies below the causal diagonal of the first 64 keys (a tile that only a cross-sequence mask
#: keeps from their dK and dV).
LENGTHS_Q, LENGTHS_K = [100, 1, 150, 0, 7], [100, 30, 140, 20, 0]
TORCH_DTYPES = {np.float16: torch.float16, ml_dtypes.bfloat16: torch.bfloat16}


def packed(lengths_q, lengths_k, heads, kv_heads, head_dim, dtype=np.float16, seed=0):
    """q, k, v and dO (torch, ``dtype``; q, k, v require gradients), cu_seqlens_q and cu_seqlens_k."""
    generator = torch.Generator().manual_seed(seed)

    def draw(rows, row_heads):
        return torch.randn((rows, row_heads, head_dim), generator=generator).to(TORCH_DTYPES[dtype])

    q, k, v = draw(sum(lengths_q), heads), draw(sum(lengths_k), kv_heads), draw(sum(lengths_k), kv_heads)
    dout = draw(sum(lengths_q), heads)
    cu_q, cu_k = (torch.tensor(np.concatenate([[0], np.cumsum(n)]), dtype=torch.int32) for n in (lengths_q, lengths_k))
    return *(x.requires_grad_() for x in (q, k, v)), dout, cu_q, cu_k


def gradients(q, k, v, dout, cu_q, cu_k, **kwargs):
    """(dq, dk, dv) of ``attention_varlen(q, k, v, cu_q, cu_k, **kwargs)`` for the output gradient ``dout``."""
    for x in (q, k, v):
        x.grad = None
    attention_varlen(q, k, v, cu_q, cu_k, **kwargs).backward(dout)
    return q.grad, k.grad, v.grad


def heads_first(x):
    """Rows [S, H, D] (torch) as ``reference``'s float32 numpy [1, H, S, D]."""
    return x.detach().float().numpy().transpose(1, 0, 2)[None]


def assert_each_sequence(grads, q, k, v, dout, cu_q, cu_k, causal, dtype=np.float16, scale=None):
    """Every sequence's gradients against ``reference`` on its rows alone (max abs error over max |gradient| below
    ``GRADIENT_TOLERANCE`` of ``dtype``); a sequence without queries or keys has zero gradients, exactly."""
    dq, dk, dv = (g.float().numpy() for g in grads)
    for b in range(len(cu_q) - 1):
        rows, keys = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        if rows.start == rows.stop or keys.start == keys.stop:
            assert not dq[rows].any() and not dk[keys].any() and not dv[keys].any(), b
            continue
        _, _, *expected = reference(heads_first(q[rows]), heads_first(k[keys]), heads_first(v[keys]),
                                    heads_first(dout[rows]), causal, scale)
        for got, want in zip((dq[rows], dk[keys], dv[keys]), expected):
            assert relative_error(got, want[0].transpose(1, 0, 2)) < GRADIENT_TOLERANCE[dtype], b


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads, kv_heads, head_dim", [(4, 2, 64), (2, 1, 128)], ids=["gqa-d64", "gqa-d128"])
def test_each_sequence_gets_its_own_gradients(heads, kv_heads, head_dim, causal):
    operands = packed(LENGTHS_Q, LENGTHS_K, heads, kv_heads, head_dim)
    grads = gradients(*operands, causal=causal)
    assert all(g.dtype == torch.float16 for g in grads)
    assert_each_sequence(grads, *operands, causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_accumulating_dq_path(causal):
    """``deterministic=False``: dQ from the dK/dV kernel's float32 reduce-adds (a sequence's last query tile also
    adds zero shares into the next sequence's rows)."""
    operands = packed(LENGTHS_Q, LENGTHS_K, 4, 2, 64, seed=1)
    assert_each_sequence(gradients(*operands, causal=causal, deterministic=False), *operands, causal)


def test_bfloat16_and_a_custom_scale():
    operands = packed([70, 130], [130, 9], 2, 2, 64, ml_dtypes.bfloat16, seed=2)
    grads = gradients(*operands, causal=True, scale=0.3)
    assert all(g.dtype == torch.bfloat16 for g in grads)
    assert_each_sequence(grads, *operands, True, ml_dtypes.bfloat16, scale=0.3)


def test_one_launch_of_each_packed_kernel_and_no_length_read_back(monkeypatch):
    """Unchecked (``check=False``): neither pass reads the lengths on the host; the backward is one launch of each
    packed kernel, the dK/dV grid sized by ``max_seqlen_k`` (or, not given, by every key row), the same gradients
    either way and as the checked call's."""
    operands = packed(LENGTHS_Q, LENGTHS_K, 2, 1, 64, seed=3)
    want = gradients(*operands, causal=True)
    launches = []
    launch_backward = VARLEN.launch_backward
    monkeypatch.setattr(VARLEN, "launch_backward", lambda *args: launches.append(launch_backward(*args)))
    monkeypatch.setattr(VARLEN, "offsets", lambda *args: pytest.fail("check=False read the lengths"))
    for max_seqlen_k in (140, None):
        got = gradients(*operands, causal=True, check=False, max_seqlen_q=150, max_seqlen_k=max_seqlen_k)
        for a, b in zip(got, want):
            assert torch.equal(a, b)
    grids = [[(script.kernel_name(), args[:2]) for script, args in launched] for launched in launches]
    total_q, total_k = sum(LENGTHS_Q), sum(LENGTHS_K)
    assert grids == [[("DotVarlenF16", (total_q, 2)), ("BackwardKVVarlenF16", (5, 140)),
                      ("BackwardQVarlenF16", (5, 150))],
                     [("DotVarlenF16", (total_q, 2)), ("BackwardKVVarlenF16", (5, total_k)),
                      ("BackwardQVarlenF16", (5, 150))]]


def test_torch_compile_traces_forward_and_backward_in_one_graph():
    """``torch.compile(fullgraph=True)`` of an unchecked call and a loss: both custom ops traced (their fake
    implementations launch nothing), the gradients those of the eager call."""
    q, k, v, _, cu_q, cu_k = packed([20, 30], [30, 30], 2, 1, 64, seed=6)

    def loss(q, k, v):
        out = attention_varlen(q, k, v, cu_q, cu_k, causal=True, check=False, max_seqlen_q=30, max_seqlen_k=30)
        return out.float().square().sum()

    want = torch.autograd.grad(loss(q, k, v), (q, k, v))
    got = torch.autograd.grad(torch.compile(loss, backend="aot_eager", fullgraph=True)(q, k, v), (q, k, v))
    for a, b in zip(got, want):
        assert torch.equal(a, b)


@pytest.mark.parametrize("deterministic", [False, True], ids=["accumulating", "deterministic"])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_interleavings(seed, deterministic, monkeypatch):
    """Each path's packed kernels under the emulator's random schedules: no race, barrier misuse or deadlock."""
    operands = packed([30, 140, 5], [140, 20, 64], 2, 1, 64, seed=4)
    monkeypatch.setenv(SEED_VARIABLE, str(seed))
    assert_each_sequence(gradients(*operands, causal=True, deterministic=deterministic), *operands, True)


def _cases():
    q, k, v, _, cu_q, cu_k = packed([10, 20], [10, 20], 2, 1, 64)
    return {
        "deterministic": ({"deterministic": 1}, "deterministic must be True or False, got 1"),
        "max_seqlen_k-type": ({"max_seqlen_k": 2.0}, "max_seqlen_k must be a non-negative int (the longest "
                                                     "sequence's keys), got 2.0"),
        "max_seqlen_k-short": ({"max_seqlen_k": 19}, "max_seqlen_k is 19, but sequence 1 has 20 keys"),
    }


@pytest.mark.parametrize("case", list(_cases()))
def test_argument_errors(case, monkeypatch):
    """Each before anything runs."""
    monkeypatch.setattr(VARLEN, "launch", lambda *args: pytest.fail("ran before the checks"))
    q, k, v, _, cu_q, cu_k = packed([10, 20], [10, 20], 2, 1, 64)
    kwargs, message = _cases()[case]
    with pytest.raises(ArgumentError) as raised:
        attention_varlen(q, k, v, cu_q, cu_k, **kwargs)
    assert message in str(raised.value)


def test_head_dim_256_has_no_backward():
    q, k, v, dout, cu_q, cu_k = packed([10, 20], [10, 20], 2, 1, 256)
    out = attention_varlen(q, k, v, cu_q, cu_k)
    with pytest.raises(ArgumentError, match=r"head_dim \(q.shape\[2\]\) is 256; the backward of attention_varlen "
                                            r"supports 64, 128"):
        out.backward(dout)


def shipped_dk_dv():
    """The planted bugs' problem on the emulator (numpy): two sequences, 40 queries over 70 keys then 100 over 60,
    one head, D 64, not causal. Returns the shipped dK and dV, the float32 reference of the first sequence's, and the
    arguments of the dK/dV kernel's launch but its dK and dV."""
    from warpspec.dtypes import float16
    from warpspec.ops.attention_backward_kernel import BackwardKVVarlen

    q, k, v, dout, cu_q, cu_k = (x.detach().numpy() for x in packed([40, 100], [70, 60], 1, 1, 64, seed=5))
    problem = VARLEN.VarlenProblem(2, 1, 1, 64, float16, False, 0.125, 100, 70)
    out, lse2 = np.empty_like(q), np.empty((1, 140), np.float32)
    VARLEN.launch(q, k, v, cu_q, cu_k, out, lse2, problem)
    dq, dk, dv, dd = np.empty_like(q), np.empty_like(k), np.empty_like(v), np.empty((1, 140), np.float32)
    launches = VARLEN.launch_backward(q, k, v, out, dout, lse2, cu_q, cu_k, dq, dk, dv, dd, problem)
    _, _, _, *expected = reference(q[:40].transpose(1, 0, 2)[None], k[:70].transpose(1, 0, 2)[None],
                                   v[:70].transpose(1, 0, 2)[None], dout[:40].transpose(1, 0, 2)[None], False,
                                   scale=0.125)
    (kv_args,) = [args for script, args in launches if isinstance(script, BackwardKVVarlen)]
    return dk, dv, [want[0].transpose(1, 0, 2) for want in expected], kv_args[:-2]


def test_planted_bug_a_dk_dv_kernel_without_the_cross_sequence_mask():
    """A packed dK/dV kernel whose probabilities skip the mask of query columns past the sequence's end: the first
    sequence's dK and dV take the second sequence's first rows in as their own queries (its last query tile holds
    them), far past the tolerance; the shipped kernel's gradients of the same launch are within it."""
    from warpspec.dtypes import float16
    from warpspec.ops.attention_backward_kernel import BackwardKVVarlen

    class ForgetsTheSequenceEnd(BackwardKVVarlen):
        def probabilities(self, acc_s, lse, scale_log2, keys_from, offset_m, seq_q, seq_k, causal_shift):
            probs = self.exp2(acc_s * scale_log2 - lse)
            return self.cast(probs, self.dtype), probs

    dk, dv, expected, kv_args = shipped_dk_dv()
    planted_dk, planted_dv = np.empty_like(dk), np.empty_like(dv)
    ForgetsTheSequenceEnd(float16, head_dim=64, causal=False, block_m=64, num_stages=3)(*kv_args, planted_dk,
                                                                                        planted_dv)
    for shipped, planted, want in zip((dk, dv), (planted_dk, planted_dv), expected):
        assert relative_error(shipped[:70], want) < GRADIENT_TOLERANCE[np.float16]
        assert relative_error(planted[:70], want) > 0.1
        np.testing.assert_array_equal(planted[70:], shipped[70:])  # the second sequence's last tile is its own


def test_planted_bug_a_tma_store_past_the_sequence_end_is_a_race_at_its_line():
    """A packed dK/dV kernel that stores every warpgroup's 64 keys by TMA, also the first sequence's last one,
    whose rows 70 ... 127 are the second sequence's keys: the emulator reports the two blocks' writes of dK row 70
    as a RaceError at the TMA store, through the planted store."""
    import inspect

    from warpspec import RaceError
    from warpspec.dtypes import float16
    from warpspec.ops import attention_backward_kernel as bwk

    class StoresPastTheSequenceEnd(bwk.BackwardKVVarlen):
        def store_rows(self, buffer, views, tile, head, rows_from, start, count):
            self.store_output(buffer, views[1], tile, head, start + rows_from)  # planted: no row_end

    _, _, _, kv_args = shipped_dk_dv()
    dk, dv = np.empty((130, 1, 64), np.float16), np.empty((130, 1, 64), np.float16)
    with pytest.raises(RaceError) as raised:
        StoresPastTheSequenceEnd(float16, head_dim=64, causal=False, block_m=64, num_stages=3)(*kv_args, dk, dv)
    assert "tma.shared_to_global in block (0, 0, 1) writes dk_ptr[0, 70, 0] (argument 'dk_ptr'), which block " \
           "(0, 0, 0) also wrote" in str(raised.value)
    lines, first = inspect.getsourcelines(bwk.RowTileStore.store_output)
    (store,) = [first + n for n, line in enumerate(lines) if "self.tma.shared_to_global(" in line]
    assert raised.value.location.rsplit(" at ", 1)[-1] == f"{inspect.getsourcefile(bwk.RowTileStore)}:{store}"
    planted = inspect.getsourcelines(StoresPastTheSequenceEnd.store_rows)[1] + 1
    assert f"StoresPastTheSequenceEnd.store_rows at {__file__}:{planted}" in raised.value.location


@pytest.mark.parametrize("deterministic", [False, True], ids=["accumulating", "deterministic"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_nvrtc_builds_the_packed_kernels_without_spills(head_dim, deterministic):
    """NVRTC compiles each path's packed kernels of the shipped schedule (causal and not) with no spills, no stack
    and no ptxas advisory; their GEMMs as HGMMA (the dQ conversion has none), the bounds' scalar loads as LDGs, the
    accumulating path's dQ shares as TMA reduce-adds (UTMAREDG)."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble, parse_ptxas_log
    from warpspec.ops.attention_backward import backward_kernels
    from warpspec.runtime import kernel_for

    names = ["DotVarlen", "BackwardKVVarlen", "BackwardQVarlen"] if deterministic else \
        ["DotVarlen", "BackwardKVDQVarlen", "ConvertDQ"]
    for causal in (False, True):
        problem = VARLEN.VarlenProblem(2, 2, 1, head_dim, bfloat16, causal, 0.125, 8, 8)
        kernels = backward_kernels(problem, deterministic, packed=True)
        assert [type(kernel).__name__ for kernel in kernels] == names
        for kernel in kernels:
            name = type(kernel).__name__
            built = compile_kernel(kernel_for(kernel, {}))
            (report,) = parse_ptxas_log(built.module.log).values()
            assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == \
                (0, 0, 0, ()), name
            counts = count_instructions(disassemble(built.module.cubin), ["HGMMA", "LDG", "LDL", "STL", "UTMAREDG"])
            assert (counts["HGMMA"] > 0) == (name != "ConvertDQ") and counts["LDL"] == counts["STL"] == 0, name
            assert (counts["UTMAREDG"] > 0) == (name == "BackwardKVDQVarlen"), name
            if name.startswith("Backward"):
                assert counts["LDG"] >= 4, name  # cu_seqlens_q[b], [b + 1], cu_seqlens_k[b], [b + 1]


def test_the_benchmarks_backward_mode_checks_the_gradients():
    """``benchmarks/attention_varlen.py --backward --dry-run``: both masks, the packed and the dense gradients
    checked against SDPA's (the emulator; nothing timed)."""
    from tests.ops.test_benchmarks_dry_run import dry_run

    found = dry_run("attention_varlen.py", "--backward")
    assert found.returncode == 0, found.stderr[-2000:]
    rows = [ast.literal_eval(line) for line in found.stdout.splitlines() if line.startswith("{")]
    assert [row["causal"] for row in rows] == [False, True]
    assert all(row["error"] < 4e-2 and row["dense_error"] < 4e-2 and "varlen_ms" not in row for row in rows)
