"""Two GPUs without a GPU: a faked driver (device ordinals, primary contexts, module loads) and the fake device side
of launch plans (tests/cuda/test_launch_plan.py) stand for GPUs 0 and 1. Checked: a module, a kernel function and
a plan belong to one device; a launch goes to its arrays' GPU whatever the current device, in that GPU's context,
with its stream, and leaves the context it found current; arrays on two GPUs are an ArgumentError naming both."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from warpspec.cuda import driver, launch
from warpspec.errors import ArgumentError
from warpspec.runtime import kernel_for

from .test_launch_plan import BASE, PretendCudaDLPack, Probe, array, good, side  # noqa: F401 - side: a fixture

SUCCESS = driver.cu.CUresult.CUDA_SUCCESS


class FakeDriver:
    """The driver calls of contexts and modules: device ``d``'s primary context is ``0xC0 + d``; a module loaded
    in context ``c`` gets handle ``(c, n)`` (the n-th load), its functions ``(module handle, name)``."""

    def __init__(self, devices: int = 2):
        self.devices, self.current, self.loads = devices, 0, []

    def cuInit(self, flags):
        return (SUCCESS,)

    def cuDeviceGet(self, ordinal):
        if not 0 <= ordinal < self.devices:
            return (driver.cu.CUresult.CUDA_ERROR_INVALID_DEVICE, None)
        return (SUCCESS, ordinal)

    def cuDevicePrimaryCtxRetain(self, device):
        return (SUCCESS, 0xC0 + device)

    def cuCtxGetCurrent(self):
        return (SUCCESS, self.current)

    def cuCtxSetCurrent(self, ctx):
        self.current = int(ctx)
        return (SUCCESS,)

    def cuModuleLoadData(self, cubin):
        self.loads.append((self.current, cubin))
        return (SUCCESS, (self.current, len(self.loads)))

    def cuModuleGetFunction(self, module, name):
        # A module's functions are looked up in the module's own context.
        assert self.current == module[0], "a function looked up outside its module's context"
        return (SUCCESS, (module, name))


@pytest.fixture
def fake_driver(monkeypatch):
    fake = FakeDriver()
    for name in ("cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxGetCurrent", "cuCtxSetCurrent",
                 "cuModuleLoadData", "cuModuleGetFunction"):
        monkeypatch.setattr(driver.cu, name, getattr(fake, name))
    monkeypatch.setattr(driver, "_initialised", False)
    monkeypatch.setattr(driver, "_contexts", {})
    monkeypatch.setattr(driver, "_modules", {})
    return fake


def test_two_devices_never_share_a_module_or_a_function(fake_driver):
    cubin = b"\x7fELF one kernel"
    on_zero, on_one = driver.load_module(cubin, 0), driver.load_module(cubin, 1)
    assert (on_zero.device, on_one.device) == (0, 1)
    # Each cubin was loaded into its device's own context, once per device.
    assert [context for context, _ in fake_driver.loads] == [0xC0, 0xC1]
    assert on_zero.handle != on_one.handle
    assert driver.load_module(cubin, 1) is on_one and driver.load_module(cubin, 0) is on_zero
    assert len(fake_driver.loads) == 2
    fake_driver.current = 0xC0
    kernel_one, kernel_zero = on_one.function("k"), on_zero.function("k")
    assert kernel_one.handle == (on_one.handle, b"k") and kernel_zero.handle == (on_zero.handle, b"k")
    # Another cubin is another module on each device.
    assert driver.load_module(b"\x7fELF another", 1) is not on_one


def test_load_module_defaults_to_the_current_device(fake_driver, monkeypatch):
    monkeypatch.setattr(driver, "default_device", lambda: 1)
    assert driver.load_module(b"cubin").device == 1


def test_on_device_puts_back_the_context_it_found(fake_driver):
    driver.context(0)
    assert fake_driver.current == 0xC0
    with driver.on_device(1) as ctx:
        assert int(ctx) == 0xC1 and fake_driver.current == 0xC1
    assert fake_driver.current == 0xC0
    with pytest.raises(ValueError):
        with driver.on_device(1):
            raise ValueError("work on GPU 1 failed")
    assert fake_driver.current == 0xC0


def test_use_device_selects_the_current_device_without_pytorch(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert driver.default_device() == 0
    with driver.use_device(1):
        assert driver.default_device() == 1
        with driver.use_device(0):
            assert driver.default_device() == 0
        assert driver.default_device() == 1
    assert driver.default_device() == 0


def test_array_device_reads_each_kind_of_array():
    assert driver.array_device(array((4, 8), device=1), "x") == 1
    assert driver.array_device(PretendCudaDLPack(np.zeros(4, np.float16)), "x") == 3
    with pytest.raises(ArgumentError, match="argument 'x': list object is not a GPU array"):
        driver.array_device([1.0], "x")


def on(device: int, **changes) -> dict:
    """Probe's arguments with both arrays on ``device``."""
    return good(src_ptr=array((128, 64), device=device),
                dst_ptr=array((128, 64), device=device, pointer=BASE + 2**20), **changes)


def test_a_launch_goes_to_its_arrays_gpu_whatever_the_current_device(side):
    side.stream_getter = lambda torch_arrays: lambda device: 0x5000 + device  # each device's current stream
    kernel = Probe()
    built = launch.compile_kernel(kernel_for(kernel, {"n_size": 64}))
    kernel(*on(0).values())
    assert side.current_context == 0xC0
    kernel(*on(1).values())  # the current device is still 0
    call = side.launches[-1]
    assert (call.function, call.context, call.stream) == (0xF01, 0xC1, 0x5001)
    # The context found current (device 0's) is current again after the launch.
    assert side.current_context == 0xC0
    # Each device has its own plan, and the fast entry of each serves its own device.
    assert sorted(plan.device for plan in built.plans) == [0, 1]
    for device in (1, 0, 1):
        kernel(*on(device).values())
        assert (side.launches[-1].function, side.launches[-1].context) == (0xF00 + device, 0xC0 + device)
    assert len(built.plans) == 2 and len(kernel._warpspec_calls) == 2
    # With GPU 1 current, arrays on GPU 0 still launch on 0.
    side.device = 1
    kernel(*on(0).values())
    assert side.launches[-1].function == 0xF00 and len(built.plans) == 2


def test_a_plan_made_for_another_gpu_leaves_the_current_context(side):
    side.current_context = 0xC0
    Probe()(*on(1).values())
    assert side.current_context == 0xC0 and side.launches[-1].context == 0xC1


@pytest.mark.parametrize("src_device, dst_device", [(0, 1), (1, 0)])
def test_arrays_on_two_gpus_are_an_argument_error_naming_both(side, src_device, dst_device):
    arguments = good(src_ptr=array((128, 64), device=src_device),
                     dst_ptr=array((128, 64), device=dst_device, pointer=BASE + 2**20))
    kernel = Probe()
    for call in (lambda: kernel(**arguments), lambda: kernel(*arguments.values())):
        with pytest.raises(ArgumentError) as raised:
            call()
        # The kernel's first array parameter (src_ptr) fixes the GPU; the other is named against it.
        assert str(raised.value) == (f"argument 'dst_ptr' is on GPU {dst_device} but argument 'src_ptr' is on GPU "
                                     f"{src_device}: every array of one launch must be on the same GPU")
    assert side.launches == []


def test_a_dlpack_array_on_another_gpu_mixed_with_one_on_gpu_0(side):
    src = PretendCudaDLPack(np.zeros((128, 64), np.float16))  # reports CUDA device 3
    with pytest.raises(ArgumentError, match="argument 'dst_ptr' is on GPU 0 but argument 'src_ptr' is on GPU 3"):
        Probe()(*good(src_ptr=src).values())


def test_debug_mode_uses_the_record_and_module_of_the_arrays_gpu(side, monkeypatch):
    from types import SimpleNamespace

    from warpspec.cuda import debug

    made, record = [], (ctypes.c_uint64 * debug.RECORD_WORDS)()  # the record: zeros, no wait gave up
    monkeypatch.setattr(debug, "_record",
                        lambda device: made.append(("record", device)) or (ctypes.addressof(record), 0x900))
    monkeypatch.setattr(debug, "load_module",
                        lambda cubin, device: made.append(("module", device)) or SimpleNamespace(handle=device))
    monkeypatch.setattr(debug, "on_device", lambda device: _Recording(made, device))
    monkeypatch.setattr(driver.cu, "cuModuleGetGlobal", lambda module, name: (SUCCESS, 0x100 + module, 8))
    monkeypatch.setattr(driver.cu, "cuMemcpyHtoD", lambda address, data, size: made.append(("set", address)) or
                        (SUCCESS,))
    monkeypatch.setattr(driver.cu, "cuCtxSynchronize", lambda: made.append("wait") or (SUCCESS,))
    kernel = kernel_for(Probe(), {"n_size": 64})
    debug.run_debug(kernel, {k: v for k, v in on(1).items() if k != "n_size"})  # the current device is 0
    assert made == [("on", 1), ("record", 1), ("module", 1), ("set", 0x101), "wait", ("off", 1)]
    assert side.launches[-1].context == 0xC1


class _Recording:
    """A stand-in for ``driver.on_device`` that notes entering and leaving."""

    def __init__(self, made, device):
        self.made, self.device = made, device

    def __enter__(self):
        self.made.append(("on", self.device))

    def __exit__(self, *exc):
        self.made.append(("off", self.device))
        return False
