"""``warpspec.ops.matmul`` on torch CPU tensors (skipped where torch is not installed): the custom op
``warpspec::matmul`` runs them on the emulator, returns torch tensors, traces under torch.compile(fullgraph=True)
without a graph break, describes its output on fake tensors and passes torch's opcheck."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from warpspec import ArgumentError, ops  # noqa: E402


def operands(m=96, n=80, k=64, dtype=torch.float16, seed=0):
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=generator).to(dtype)
    w = torch.randn(n, k, generator=generator).to(dtype)
    bias = torch.randn(n, generator=generator).to(dtype)
    return a, w, bias


def test_cpu_tensors_run_on_the_emulator_and_come_back_as_tensors():
    a, w, bias = operands(72, 40, 48)
    c = ops.matmul(a, w.T, bias=bias, activation="relu")
    assert isinstance(c, torch.Tensor) and c.shape == (72, 40) and c.dtype == torch.float16
    expected = torch.relu(a.float() @ w.float().T + bias.float())
    torch.testing.assert_close(c.float(), expected, rtol=4e-3, atol=4e-3)
    row_major = ops.matmul(a, w.T.contiguous(), out_dtype=torch.float32)
    assert row_major.dtype == torch.float32
    torch.testing.assert_close(row_major, a.float() @ w.float().T, rtol=1e-5, atol=1e-5)


def test_float8_with_tensor_scales():
    a, w, _ = operands(96, 80, 64)
    a8, w8 = (a * 4).to(torch.float8_e4m3fn), (w * 4).to(torch.float8_e4m3fn)
    scale_a, scale_b = torch.tensor([0.5]), torch.tensor([0.25])
    c = ops.matmul(a8, w8.T, scale_a=scale_a, scale_b=scale_b)
    assert c.dtype == torch.bfloat16
    expected = 0.125 * (a8.float() @ w8.float().T)
    torch.testing.assert_close(c.float(), expected, rtol=2e-2, atol=2e-2)


def test_out_is_written_in_place():
    a, w, _ = operands()
    out = torch.full((96, 80), float("nan"), dtype=torch.float16)
    assert ops.matmul(a, w.T, out=out) is out
    torch.testing.assert_close(out.float(), a.float() @ w.float().T, rtol=4e-3, atol=4e-3)


def test_overwriting_a_tensor_saved_for_backward_is_caught_by_autograd():
    """The op advances out's version as an in-place op does, so a backward through the old values refuses."""
    a, w, _ = operands()
    out = torch.zeros(96, 80, dtype=torch.float16)
    weight = torch.ones(96, 80, dtype=torch.float16, requires_grad=True)
    loss = (weight * out).sum()  # saves out for the backward
    version = out._version
    ops.matmul(a, w.T, out=out)
    assert out._version == version + 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_inference_mode_tensors_are_written_too():
    """Inference tensors keep no version counter; writing one is still a plain call."""
    with torch.inference_mode():
        a, w, _ = operands(seed=2)
        c = ops.matmul(a, w.T)
    torch.testing.assert_close(c.float(), a.float() @ w.float().T, rtol=4e-3, atol=4e-3)


def test_torch_compile_fullgraph_has_no_graph_break():
    a, w, bias = operands(seed=1)

    def f(a, w, bias):
        return ops.matmul(a, w.T, bias=bias, activation="relu").float() * 2

    explanation = torch._dynamo.explain(f)(a, w, bias)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(a, w, bias), f(a, w, bias))


def test_fake_tensors_get_the_output_description():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(300, 64, dtype=torch.bfloat16)
        w = torch.empty(100, 64, dtype=torch.bfloat16)
        c = ops.matmul(a, w.T, out_dtype=torch.float32)
    assert c.shape == (300, 100) and c.dtype == torch.float32


def test_opcheck_accepts_the_op():
    a, w, bias = operands(64, 64, 32)
    out = torch.empty(64, 64, dtype=torch.float16)
    torch.library.opcheck(torch.ops.warpspec.matmul.default, (a, w.T, out, bias, None, "relu"))


def test_mixing_kinds_and_devices_is_refused():
    a, w, bias = operands()
    with pytest.raises(ArgumentError, match="b is a numpy array but a is a torch tensor"):
        ops.matmul(a, w.T.numpy())
    with pytest.raises(ArgumentError, match="bias is on meta but a is on cpu"):
        ops.matmul(a, w.T, bias=torch.empty(80, dtype=torch.float16, device="meta"))
    with pytest.raises(ArgumentError, match="out must have shape"):
        ops.matmul(a, w.T, out=torch.empty(80, 96, dtype=torch.float16))
    assert isinstance(ops.matmul(a.numpy(), w.T.numpy()), np.ndarray)


@pytest.mark.parametrize("op", ["matmul", "grouped_matmul", "attention", "attention_varlen", "attention_paged"])
def test_torch_imported_after_warpspec_ops_registers_the_ops_for_a_first_compiled_call(op):
    """warpspec.ops imported before torch (a fresh process, for the import order): importing torch registers the
    custom ops, so a fullgraph compilation traces the first call of each op and matches eager. Before, the
    registration waited for a first eager call, and dynamo, which cannot trace a registration, failed; and
    attention_paged's size check (np.prod, which dynamo traces as a tensor op) could not be guarded on."""
    code = textwrap.dedent(f"""
        from warpspec import ops
        import torch
        a, w = torch.randn(64, 32).half(), torch.randn(2, 48, 32).half()
        ends, cu = torch.tensor([20, 64], dtype=torch.int32), torch.tensor([0, 20, 64], dtype=torch.int32)
        q = torch.randn(1, 2, 64, 64).half()
        kc = torch.randn(4, 16, 2, 64).half()
        table, lens = torch.tensor([[2, 0]], dtype=torch.int32), torch.tensor([20], dtype=torch.int32)
        calls = {{"matmul": lambda: ops.matmul(a, w[0].T),
                 "grouped_matmul": lambda: ops.grouped_matmul(a, w.transpose(1, 2), ends),
                 "attention": lambda: ops.attention(q, q, q, causal=True),
                 "attention_varlen": lambda: ops.attention_varlen(q[0].transpose(0, 1), q[0].transpose(0, 1),
                                                                 q[0].transpose(0, 1), cu, cu, check=False,
                                                                 max_seqlen_q=44),
                 "attention_paged": lambda: ops.attention_paged(q[:, :, :1].transpose(1, 2), kc, kc, table, lens,
                                                                check=False)}}
        compiled = torch.compile(lambda: calls["{op}"]() * 2, fullgraph=True, backend="aot_eager")
        first = compiled()
        print(torch.equal(first, calls["{op}"]() * 2))
    """)
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert found.stdout.split() == ["True"], found.stderr[-2000:]


@pytest.mark.parametrize("op", ["matmul", "attention"])
def test_a_first_call_that_skips_the_dispatcher_still_registers_the_op_for_torch_compile(op):
    """warpspec.ops imported before torch registers nothing; an eager call that runs the implementation directly
    (``dispatch_is_plain``, forced for CPU tensors here; what plain CUDA tensors take) must register the custom op,
    or a later torch.compile meets the registration, which dynamo cannot trace. A fresh process, for the import
    order."""
    code = textwrap.dedent(f"""
        import warpspec.ops as ops
        import torch
        import warpspec.torch_ops
        warpspec.torch_ops.dispatch_is_plain = lambda *tensors: True
        if "{op}" == "matmul":
            a, b = torch.randn(64, 64).half(), torch.randn(64, 64).half()
            call = lambda: ops.matmul(a, b)
        else:
            q, k = torch.randn(1, 2, 4, 64).half(), torch.randn(1, 2, 8, 64).half()
            call = lambda: ops.attention(q, k, k, causal=True)
        eager = call()
        compiled = torch.compile(lambda: call() * 2, fullgraph=True, backend="aot_eager")
        print(torch.equal(compiled(), eager * 2))
    """)
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert found.stdout.split() == ["True"], found.stderr[-2000:]


def test_a_call_like_an_earlier_one_takes_its_bound_launch_only_where_nothing_else_would_run(monkeypatch):
    """ops.matmul's per-call path (``_bound_call``): once a signature has a bound launch (made for plain CUDA
    tensors at their first launch; planted here on CPU tensors, with what the first launch sets), a call of its
    description takes it, allocating or with ``out=``. A call under a compiler, one that asks for a gradient, one
    the dispatcher would route (a mode, the profiler: ``dispatcher_idle``), one in debug mode (no direct launches)
    and one of another description take the full path: a product on the emulator; operands that are no tensors
    there get the full path's ArgumentError, not an AttributeError of the lookup."""
    import importlib

    from warpspec import runtime

    matmul_module = importlib.import_module("warpspec.ops.matmul")
    a, w, _ = operands(64, 48, 32)
    out = torch.empty(64, 48, dtype=torch.float16)
    ops.matmul(a, w.T)  # the signatures of both calls, the allocated one the same as out='s
    taken = []

    def bound(a_, b_, out_, bias_):
        taken.append("allocating" if out_ is None else "out")
        return "bound"

    allocated = matmul_module.signature(a, w.T, None, None, None, None).allocated
    assert allocated is matmul_module.signature(a, w.T, None, None, out, None)
    monkeypatch.setattr(allocated, "direct", bound)
    idle, compiling = [True], [False]
    calls = matmul_module._BoundCalls
    monkeypatch.setattr(calls, "tensor", torch.Tensor)
    # Set by the first bound launch, so not there before one (raising=False).
    monkeypatch.setattr(calls, "grad_enabled", torch.is_grad_enabled, raising=False)
    monkeypatch.setattr(calls, "compiling", lambda: compiling[0], raising=False)
    monkeypatch.setattr(calls, "dispatcher_idle", lambda device: idle[0], raising=False)
    assert ops.matmul(a, w.T) == "bound" and ops.matmul(a, w.T, out=out) == "bound"
    assert taken == ["allocating", "out"]

    expected = a.float() @ w.float().T
    compiling[0] = True
    torch.testing.assert_close(ops.matmul(a, w.T).float(), expected, rtol=2e-3, atol=2e-2)
    compiling[0] = False
    leaf = a.detach().requires_grad_()
    product = ops.matmul(leaf, w.T)
    assert product.grad_fn is not None
    torch.testing.assert_close(product.detach().float(), expected, rtol=2e-3, atol=2e-2)
    idle[0] = False
    torch.testing.assert_close(ops.matmul(a, w.T).float(), expected, rtol=2e-3, atol=2e-2)
    idle[0] = True
    monkeypatch.setattr(runtime, "direct_launches", lambda: False)
    torch.testing.assert_close(ops.matmul(a, w.T, out=out).float(), expected, rtol=2e-3, atol=2e-2)
    with pytest.raises(ArgumentError, match="^b is a numpy array but a is a torch tensor"):
        ops.matmul(a, w.T.numpy())  # the lookup meets an array without requires_grad: the full path's message
    with pytest.raises(ArgumentError, match="bias"):
        ops.matmul(a, w.T, bias=[0.0] * 48)
    monkeypatch.undo()  # the planted launch and state go; another description never met it anyway
    torch.testing.assert_close(ops.matmul(a[:32], w.T).float(), expected[:32], rtol=2e-3, atol=2e-2)
    assert taken == ["allocating", "out"]
