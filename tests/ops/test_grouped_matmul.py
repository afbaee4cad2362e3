"""``ops.grouped_matmul`` on the emulator against numpy (and its backward on torch CPU tensors against torch's
float32 gradients): ragged and empty groups, both layouts of the expert weights, rows past the last group, and the
argument errors."""

import ml_dtypes
import numpy as np
import pytest

from warpspec import ArgumentError, ops
from warpspec.ops import grouped

BF16 = ml_dtypes.bfloat16
#: Group sizes: empty groups first, in the middle and last, sizes no tile divides.
SIZES = [0, 40, 0, 72, 16, 0]


def expected_of(a, b, ends):
    """Each group's rows times its matrix in float32 (numpy); the rows past the last group 0."""
    out = np.zeros((a.shape[0], b.shape[2]), np.float32)
    start = 0
    for group, end in enumerate(ends):
        out[start:end] = a[start:end].astype(np.float32) @ b[group].astype(np.float32)
        start = end
    return out


def loop_product(a, w, ends):
    """The float32 torch product of each group's rows of ``a`` with its expert weight ``w[g]`` [N, K], and zero
    rows past the last group: the reference gradients flow through."""
    torch = pytest.importorskip("torch")
    a32, w32 = (t.detach().float().requires_grad_() for t in (a, w))
    pieces, start = [], 0
    for group, end in enumerate(ends.tolist()):
        pieces.append(a32[start:end] @ w32[group].T)
        start = end
    pieces.append(torch.zeros(a.shape[0] - start, w.shape[1]))
    return a32, w32, torch.cat(pieces)


@pytest.mark.parametrize("dtype", [np.float16, BF16])
@pytest.mark.parametrize("b_layout", ["row", "expert-weights"])
def test_groups_match_numpy(dtype, b_layout):
    rng = np.random.default_rng(0)
    ends = np.cumsum(SIZES).astype(np.int32)
    a = rng.standard_normal((int(ends[-1]) + 8, 64)).astype(dtype)  # 8 rows past the last group
    if b_layout == "row":
        b = rng.standard_normal((len(SIZES), 64, 48)).astype(dtype)
    else:  # [G, N, K] expert weights, transposed
        b = rng.standard_normal((len(SIZES), 48, 64)).astype(dtype).transpose(0, 2, 1)
    c = ops.grouped_matmul(a, b, ends, out_dtype=np.float32)
    assert c.shape == (a.shape[0], 48) and c.dtype == np.float32
    expected = expected_of(a, b, ends)
    np.testing.assert_allclose(c, expected, rtol=0, atol=1e-4 * np.abs(expected).max())
    assert not c[int(ends[-1]):].any()
    default = ops.grouped_matmul(a, b, ends)
    assert default.dtype == a.dtype


def test_every_group_empty():
    a = np.zeros((16, 64), np.float16)
    b = np.zeros((3, 64, 32), np.float16)
    c = ops.grouped_matmul(a, b, np.zeros(3, np.int32))
    assert c.shape == (16, 32) and not c.any()


@pytest.mark.parametrize("call, fragment", [
    (lambda a, b, o: ops.grouped_matmul(a, b, o.astype(np.int64)), "offs must be int32 of shape (3,)"),
    (lambda a, b, o: ops.grouped_matmul(a, b, o[:2]), "offs must be int32 of shape (3,)"),
    (lambda a, b, o: ops.grouped_matmul(a, b, np.array([8, 4, 16], np.int32)), "offs must be non-decreasing"),
    (lambda a, b, o: ops.grouped_matmul(a, b, np.array([8, 16, 40], np.int32)), "at most total_M = 32"),
    (lambda a, b, o: ops.grouped_matmul(a, b[0], o), "b must be 3-D [G, K, N]"),
    (lambda a, b, o: ops.grouped_matmul(a[None], b, o), "a must be 2-D [total_M, K]"),
    (lambda a, b, o: ops.grouped_matmul(a[:, :32], b, o), "b has K = 64 (b.shape[1]) but a has 32 columns"),
    # a reversed a raised a raw ValueError, a reversed b an error about the kernel's view of b_ptr
    (lambda a, b, o: ops.grouped_matmul(a[::-1], b, o), "a has strides (-64, 1): a negative stride"),
    (lambda a, b, o: ops.grouped_matmul(a, b[:, ::-1], o), "b has strides (1024, -16, 1): a negative stride"),
])
def test_argument_errors(call, fragment):
    a = np.zeros((32, 64), np.float16)
    b = np.zeros((3, 64, 16), np.float16)
    with pytest.raises(ArgumentError) as caught:
        call(a, b, np.array([8, 8, 32], np.int32))
    assert fragment in str(caught.value)


def test_the_backward_matches_torch():
    torch = pytest.importorskip("torch")
    generator = torch.Generator().manual_seed(0)
    ends = torch.tensor(np.cumsum(SIZES), dtype=torch.int32)
    a = torch.randn(int(ends[-1]), 64, generator=generator).half().requires_grad_()
    w = torch.randn(len(SIZES), 48, 64, generator=generator).half().requires_grad_()  # expert weights [G, N, K]
    c = ops.grouped_matmul(a, w.transpose(1, 2), ends)
    grad = torch.randn(c.shape, generator=generator)
    (c.float() * grad).sum().backward()
    a32, w32, c32 = loop_product(a, w, ends)
    (c32 * grad).sum().backward()
    for found, expected in ((a.grad, a32.grad), (w.grad, w32.grad)):
        error = (found.float() - expected).abs().max() / expected.abs().max()
        assert found.shape == expected.shape and error <= 2e-3, error


@pytest.mark.parametrize("layout", ["a-column-slice", "a-strided-columns", "b-strided-columns",
                                    "b-broadcast-expert-weights", "ragged-k"])
def test_layouts_the_kernel_cannot_read_as_they_are(layout, monkeypatch):
    """A row-sliced ``a`` is read in place (its pitch), a ``b`` or ``a`` without a contiguous axis is copied (a
    broadcast ``b`` of expert weights in their own layout), and a K whose pitch TMA cannot describe (20 · 2 bytes)
    takes one ops.matmul per group: all match numpy."""
    per_group = []
    slow_path = grouped._per_group
    monkeypatch.setattr(grouped, "_per_group", lambda *args: per_group.append(slow_path(*args)))
    rng = np.random.default_rng(1)
    ends = np.cumsum(SIZES).astype(np.int32)
    k = 20 if layout == "ragged-k" else 64
    rows = int(ends[-1]) + 3
    a = rng.standard_normal((rows, k)).astype(np.float16)
    b = rng.standard_normal((len(SIZES), k, 48)).astype(np.float16)
    if layout == "a-column-slice":
        a = np.concatenate([a, np.ones((rows, 8), np.float16)], axis=1)[:, :k]
    elif layout == "a-strided-columns":
        a = np.repeat(a, 2, axis=1)[:, ::2]
    elif layout == "b-strided-columns":
        b = np.repeat(b, 2, axis=2)[:, :, ::2]
    elif layout == "b-broadcast-expert-weights":  # one [N, K] expert weight for every group, transposed
        weight = np.ascontiguousarray(b[:1].transpose(0, 2, 1))  # [1, N, K]
        b = np.broadcast_to(weight, (len(SIZES), 48, k)).transpose(0, 2, 1)
    c = ops.grouped_matmul(a, b, ends, out_dtype=np.float32)
    expected = expected_of(a, b, ends)
    np.testing.assert_allclose(c, expected, rtol=0, atol=1e-4 * np.abs(expected).max())
    assert not c[int(ends[-1]):].any()
    assert len(per_group) == (layout == "ragged-k")  # only the ragged K leaves the grouped kernel


def test_a_cpu_tensor_runs_the_grouped_kernel_on_the_emulator():
    torch = pytest.importorskip("torch")
    generator = torch.Generator().manual_seed(2)
    ends = torch.tensor(np.cumsum(SIZES), dtype=torch.int32)
    a = torch.randn(int(ends[-1]) + 5, 64, generator=generator).bfloat16()
    w = torch.randn(len(SIZES), 40, 64, generator=generator).bfloat16()
    c = ops.grouped_matmul(a, w.transpose(1, 2), ends, out_dtype=torch.float32)
    expected = expected_of(a.float().numpy(), w.float().numpy().transpose(0, 2, 1), ends.numpy())
    np.testing.assert_allclose(c.numpy(), expected, rtol=0, atol=1e-4 * np.abs(expected).max())
    assert c.dtype == torch.float32 and not c[int(ends[-1]):].any()


def test_a_call_like_an_earlier_one_takes_its_bound_launch_only_where_nothing_else_would_run(monkeypatch):
    """The op's per-call path: once a description has a bound launch (``GroupedCall.direct``, made for plain CUDA
    tensors at their first launch; planted here on CPU tensors), a call of it takes that launch alone. A call
    under a compiler, one that asks for a gradient, one the dispatcher would route (``dispatcher_idle``), one in
    debug mode (no direct launches), one whose launch declines (``direct`` returns None: an operand off TMA's 16
    bytes) and one of another description take the full path: the kernel on the emulator."""
    torch = pytest.importorskip("torch")
    from warpspec import runtime, torch_ops

    generator = torch.Generator().manual_seed(4)
    ends = torch.tensor(np.cumsum(SIZES), dtype=torch.int32)
    a = torch.randn(int(ends[-1]) + 3, 64, generator=generator).bfloat16()
    w = torch.randn(len(SIZES), 40, 64, generator=generator).bfloat16()
    expected = torch.from_numpy(expected_of(a.float().numpy(), w.float().numpy().transpose(0, 2, 1), ends.numpy()))
    ops.grouped_matmul(a, w.transpose(1, 2), ends)
    found = grouped.call_for(a, w.transpose(1, 2), ends, None)
    assert found.direct is None  # CPU tensors never get one
    taken, answer = [], ["bound"]

    def bound(a_, b_, offs_):
        taken.append((a_ is a, offs_ is ends))
        return answer[0]

    idle, compiling = [True], [False]
    monkeypatch.setattr(found, "direct", bound)
    monkeypatch.setattr(torch_ops, "dispatcher_idle", lambda device: idle[0])
    monkeypatch.setattr(runtime, "direct_launches", lambda: True)
    assert ops.grouped_matmul(a, w.transpose(1, 2), ends) == "bound" and taken == [(True, True)]

    def full_path(x=a):  # the emulator's product, not the planted launch
        torch.testing.assert_close(ops.grouped_matmul(x, w.transpose(1, 2), ends).float(), expected[:len(x)],
                                   rtol=1e-2, atol=1e-2)

    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: compiling[0])
    compiling[0] = True
    full_path()
    compiling[0] = False
    product = ops.grouped_matmul(a.detach().requires_grad_(), w.transpose(1, 2), ends)
    assert product.grad_fn is not None
    idle[0] = False
    full_path()
    idle[0] = True
    answer[0] = None
    full_path()
    assert len(taken) == 2  # the declining launch was asked, then the full path ran
    answer[0] = "bound"
    monkeypatch.setattr(runtime, "direct_launches", lambda: False)
    full_path()
    monkeypatch.setattr(runtime, "direct_launches", lambda: True)
    full_path(a[:-1])  # another description (fewer rows)
    assert len(taken) == 2


def test_a_decode_step_on_one_expert_splits_its_few_tiles(monkeypatch):
    """Five tokens, all routed to one of three experts: two output tiles on a grid of eight blocks, each tile's 9
    K-tiles split between two of them (``GroupedGemm.splits_for``): the first parts' sums pass through the
    workspace, and the result is numpy's."""
    workspaces = []
    make = grouped.workspace_like
    monkeypatch.setattr(grouped, "workspace_like", lambda *args: workspaces.append(make(*args)) or workspaces[-1])
    rng = np.random.default_rng(3)
    ends = np.array([0, 5, 5], np.int32)
    a = rng.standard_normal((8, 9 * 64)).astype(np.float16)
    b = rng.standard_normal((3, 9 * 64, 136)).astype(np.float16)
    c = ops.grouped_matmul(a, b, ends, out_dtype=np.float32)
    expected = expected_of(a, b, ends)
    np.testing.assert_allclose(c, expected, rtol=0, atol=1e-4 * np.abs(expected).max())
    assert not c[5:].any()
    ((partials, flags),) = workspaces
    assert partials.any() and not flags.any()


def test_offsets_and_operands_no_pitch_describes_are_copied():
    """A strided ``offs`` (every other element of a wider array) and a broadcast ``b`` (one expert's matrix for all
    groups, stride 0) give numpy's result, in numpy and in CPU tensors."""
    rng = np.random.default_rng(4)
    ends = np.cumsum(SIZES).astype(np.int32)
    a = rng.standard_normal((int(ends[-1]), 64)).astype(np.float16)
    b = np.broadcast_to(rng.standard_normal((1, 64, 48)).astype(np.float16), (len(SIZES), 64, 48))
    strided = np.repeat(ends, 2)[::2]
    expected = expected_of(a, b, ends)
    np.testing.assert_allclose(ops.grouped_matmul(a, b, strided, out_dtype=np.float32), expected, rtol=0,
                               atol=1e-4 * np.abs(expected).max())
    torch = pytest.importorskip("torch")
    c = ops.grouped_matmul(torch.from_numpy(a), torch.from_numpy(b[:1].copy()).expand(len(SIZES), 64, 48),
                           torch.from_numpy(np.repeat(ends, 2))[::2], out_dtype=torch.float32)
    np.testing.assert_allclose(c.numpy(), expected, rtol=0, atol=1e-4 * np.abs(expected).max())


@pytest.mark.parametrize("loss", ["sum", "column-sums"])
def test_the_backward_of_a_broadcast_gradient(loss):
    """``c.sum()`` hands the backward a gradient of strides (0, 0), ``(c.sum(0) * v).sum()`` one of (0, 1): both are
    materialised before the kernels read them."""
    torch = pytest.importorskip("torch")
    generator = torch.Generator().manual_seed(5)
    ends = torch.tensor(np.cumsum(SIZES), dtype=torch.int32)
    a = torch.randn(int(ends[-1]), 64, generator=generator).bfloat16().requires_grad_()
    w = torch.randn(len(SIZES), 48, 64, generator=generator).bfloat16().requires_grad_()
    v = torch.randn(48, generator=generator)
    c = ops.grouped_matmul(a, w.transpose(1, 2), ends, out_dtype=torch.float32)
    (c.sum() if loss == "sum" else (c.sum(0) * v).sum()).backward()
    a32, w32, c32 = loop_product(a, w, ends)
    (c32.sum() if loss == "sum" else (c32.sum(0) * v).sum()).backward()
    for found, expected in ((a.grad, a32.grad), (w.grad, w32.grad)):
        # bfloat16 rounds the incoming gradient and each result once, 2**-9 of the largest value each: 2**-7 holds
        # both with a margin (the measured error is at most 3.1e-3).
        error = (found.float() - expected).abs().max() / expected.abs().max()
        assert found.shape == expected.shape and error <= 2 ** -7, error


def test_torch_compile_fullgraph():
    """Traced on fake tensors (no host read of ``offs``: the kernel clamps), the compiled call matches eager."""
    torch = pytest.importorskip("torch")
    generator = torch.Generator().manual_seed(6)
    ends = torch.tensor(np.cumsum(SIZES), dtype=torch.int32)
    a = torch.randn(int(ends[-1]) + 3, 64, generator=generator).half()
    w = torch.randn(len(SIZES), 40, 64, generator=generator).half()
    compiled = torch.compile(lambda a, w, o: ops.grouped_matmul(a, w.transpose(1, 2), o) * 2, fullgraph=True,
                             backend="aot_eager")
    assert torch.equal(compiled(a, w, ends), ops.grouped_matmul(a, w.transpose(1, 2), ends) * 2)
