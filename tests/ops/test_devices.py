"""The library ops on more than one device, without a GPU: tensors of one call on two devices (CPU and meta tensors
stand for two GPUs) are an ArgumentError naming both arguments; the chosen Scripts and the stream-K workspace are
kept per device (the current device faked, and for the workspace a stand-in for PyTorch's CUDA allocator)."""

from __future__ import annotations

import importlib
import sys
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from warpspec import ops, runtime  # noqa: E402 - after the importorskip
from warpspec.errors import ArgumentError  # noqa: E402
from warpspec.ops import workspace  # noqa: E402

# The modules, not the functions of the same names that warpspec.ops exports.
matmul_module = importlib.import_module("warpspec.ops.matmul")
attention_module = importlib.import_module("warpspec.ops.attention")


def half(*shape, device="cpu"):
    return torch.zeros(shape, dtype=torch.float16, device=device)


def message(first: str, other: str, first_device: str, other_device: str) -> str:
    return (f"{other} is on {other_device} but {first} is on {first_device}: every tensor of one call must be on the "
            f"same device")


@pytest.mark.parametrize("call, first, other, devices", [
    (lambda: ops.matmul(half(64, 64), half(64, 64, device="meta")), "a", "b", ("cpu", "meta")),
    (lambda: ops.matmul(half(64, 64, device="meta"), half(64, 64)), "a", "b", ("meta", "cpu")),
    (lambda: ops.matmul(half(64, 64), half(64, 64), bias=half(64, device="meta")), "a", "bias", ("cpu", "meta")),
    (lambda: ops.matmul(half(64, 64), half(64, 64), out=half(64, 64, device="meta")), "a", "out", ("cpu", "meta")),
    (lambda: ops.attention(half(1, 2, 16, 64), half(1, 2, 16, 64, device="meta"), half(1, 2, 16, 64)),
     "q", "k", ("cpu", "meta")),
    (lambda: ops.attention(half(1, 2, 16, 64), half(1, 2, 16, 64), half(1, 2, 16, 64, device="meta")),
     "q", "v", ("cpu", "meta")),
])
def test_tensors_on_two_devices_are_an_argument_error_naming_both(call, first, other, devices):
    with pytest.raises(ArgumentError) as raised:
        call()
    assert str(raised.value) == message(first, other, *devices)


@pytest.fixture
def current_gpu(monkeypatch):
    """The CUDA back end and a current device the test sets (``current_gpu.index``)."""
    state = SimpleNamespace(index=0)
    monkeypatch.setattr(runtime, "get_backend", lambda: "cuda")
    monkeypatch.setattr(runtime, "current_device", lambda: state.index)
    return state


def test_matmul_chooses_a_script_per_device(current_gpu, monkeypatch):
    problem = matmul_module.validate(half(256, 128), half(128, 256), None, None, None, None)
    made = []
    monkeypatch.setattr(matmul_module, "_chosen", {})
    monkeypatch.setattr(matmul_module, "choose_schedule", lambda problem, args, on_gpu: {"device": current_gpu.index})
    monkeypatch.setattr(matmul_module, "_buildable",
                        lambda problem, schedule, args: made.append(schedule) or SimpleNamespace(**schedule))
    on_zero = matmul_module.script_for(problem, ())
    current_gpu.index = 1
    on_one = matmul_module.script_for(problem, ())
    assert (on_zero.device, on_one.device) == (0, 1) and made == [{"device": 0}, {"device": 1}]
    assert matmul_module.script_for(problem, ()) is on_one
    current_gpu.index = 0
    assert matmul_module.script_for(problem, ()) is on_zero and len(made) == 2


def test_attention_chooses_a_script_per_device(current_gpu, monkeypatch):
    from warpspec.cuda import driver
    from warpspec.tune import tuner

    problem = attention_module.validate(half(1, 2, 128, 64), half(1, 2, 128, 64), half(1, 2, 128, 64), True, None)
    asked = []
    monkeypatch.setattr(attention_module, "_chosen", {})
    monkeypatch.setattr(driver, "default_device", lambda: current_gpu.index)
    # The stored winner (as tune_attention leaves it), looked up on the current device.
    monkeypatch.setattr(tuner, "stored_schedule", lambda tuned, args, kwargs: asked.append(current_gpu.index) or
                        dict(attention_module.DEFAULT_SCHEDULES[64]))
    on_zero = attention_module.script_for(problem, (), persistent=False)
    current_gpu.index = 1
    on_one = attention_module.script_for(problem, (), persistent=False)
    assert asked == [0, 1]  # each device's stored winner was looked up, none served from the other's choice
    assert attention_module.script_for(problem, (), persistent=False) is on_one
    current_gpu.index = 0
    assert attention_module.script_for(problem, (), persistent=False) is on_zero and asked == [0, 1]


class FakeCudaTorch:
    """What ``workspace_like`` asks of PyTorch for CUDA tensors: the current stream of a device, allocation on a
    device, capture state. Allocations are recorded as (kind, elements, device)."""

    float32, int32 = torch.float32, torch.int32

    def __init__(self):
        self.streams = {0: 0x100, 1: 0x200}
        self.made = []
        self.cuda = SimpleNamespace(is_current_stream_capturing=lambda: False,
                                    current_stream=lambda device: SimpleNamespace(
                                        cuda_stream=self.streams[device.index]))

    def empty(self, count, dtype, device):
        return self._make("empty", count, dtype, device)

    def zeros(self, count, dtype, device):
        return self._make("zeros", count, dtype, device)

    def _make(self, kind, count, dtype, device):
        self.made.append((kind, count, device.index))
        return SimpleNamespace(numel=lambda: count, device=device, dtype=dtype)


def test_the_stream_k_workspace_is_kept_per_device_and_stream(monkeypatch):
    fake = FakeCudaTorch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(workspace, "_eager", {})
    on = {index: SimpleNamespace(device=torch.device("cuda", index)) for index in (0, 1)}
    zero = workspace.workspace_like(on[0], 1024, 132)
    one = workspace.workspace_like(on[1], 1024, 132)
    assert zero[0].device.index == 0 and one[0].device.index == 1 and zero is not one
    # The flags of each device's workspace were zeroed on that device.
    assert fake.made == [("empty", 1024, 0), ("zeros", 132, 0), ("empty", 1024, 1), ("zeros", 132, 1)]
    assert workspace.workspace_like(on[0], 512, 132) is zero and workspace.workspace_like(on[1], 1024, 100) is one
    # Another stream on device 1: a workspace of its own.
    fake.streams[1] = 0x201
    assert workspace.workspace_like(on[1], 1024, 132) is not one
    assert sorted(workspace._eager) == [(0, 0x100), (1, 0x200), (1, 0x201)]


def test_placeholders_are_kept_per_device(monkeypatch):
    fake = FakeCudaTorch()
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(workspace, "_placeholders", {})
    on = {index: SimpleNamespace(device=torch.device("cuda", index)) for index in (0, 1)}
    zero, one = workspace.placeholders_like(on[0]), workspace.placeholders_like(on[1])
    assert zero[0].device.index == 0 and one[0].device.index == 1
    assert workspace.placeholders_like(on[1]) is one
