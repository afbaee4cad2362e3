"""Launch plans on the CPU: the GPU side is a fake that records launches and encodes recognisable tensor maps.

Asserts what a launch hands the driver (grid, block, shared memory, stream, cluster, every parameter slot and
tensor map), that every bad argument is refused with the message the launch path gave before plans (the strings
below were produced by it), that a plan is rebuilt, never reused, when an argument's dtype, device, rank or a
compile-time value changes, that tensor maps are cached, and what a call costs.
"""

from __future__ import annotations

import ctypes
import struct
from contextlib import contextmanager

import numpy as np
import pytest

import warpspec
from warpspec import boolean, cdiv, float16, float32, int32, int64, uint32
from warpspec.cuda import launch, plan
from warpspec.cuda.compiler import CompiledModule
from warpspec.cuda.driver import CLUSTER_DIMENSION, DeviceArray, LaunchAttribute, LaunchConfig
from warpspec.errors import ArgumentError
from warpspec.runtime import run_script
from warpspec.tune.bench import host_us_per_call


class Probe(warpspec.Script):
    """Copies src to dst through one TMA tile per block; takes a scalar of every runtime type."""

    def __init__(self, tile_m=64, cluster=1):
        super().__init__()
        self.tile_m, self.cluster = tile_m, cluster

    def __call__(self, m_size: int32, n_size: int, src_ptr: ~float16, dst_ptr: ~float16, scale: float32,
                 flag: boolean, count: uint32, big: int64, row_stride: int32, col_stride: int32 = 1):
        self.attrs.blocks = [cdiv(m_size, self.tile_m)]
        self.attrs.warps = 2
        self.attrs.cluster_blocks = [self.cluster]
        offset_m: int32 = self.tile_m * self.blockIdx.x
        src = self.global_view(src_ptr, dtype=float16, shape=[m_size, n_size], strides=[row_stride, col_stride])
        dst = self.global_view(dst_ptr, dtype=float16, shape=[m_size, n_size])
        buffers = self.shared_tensor(dtype=float16, shape=[1, self.tile_m, 64])
        full = self.mbarrier.alloc(counts=[1])
        with self.thread_group(thread_begin=0, num_threads=32):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(full[0], transaction_bytes=buffers[0].nbytes)
                self.tma.global_to_shared(src=src, dst=buffers[0], offsets=[offset_m, 0], mbarrier=full[0])
            self.mbarrier.wait(full[0], phase=0)
            with self.single_thread():
                self.tma.shared_to_global(src=buffers[0], dst=dst, offsets=[offset_m, 0])
                self.tma.commit_group()
                self.tma.wait_group(0)


def _line_of(text: str) -> int:
    with open(__file__) as source:
        return next(number for number, line in enumerate(source, 1) if text in line)


SRC_LINE = _line_of("src = self.global_view(")  # where the two views are declared, as errors name them
DST_LINE = _line_of("dst = self.global_view(")
BLOCKS_LINE = _line_of("self.attrs.blocks = [")  # where the grid is set, as an error about it names it
BASE = 0x7F0000000000


def array(shape, dtype="float16", device=0, pointer=BASE, strides=None):
    """A DeviceArray: what as_device_array makes of any GPU array."""
    if strides is None:
        strides, running = [], 1
        for extent in reversed(shape):
            strides.append(running)
            running *= extent
        strides = tuple(reversed(strides))
    return DeviceArray(pointer, tuple(shape), tuple(strides), dtype, device)


def good(**changes):
    arguments = dict(m_size=128, n_size=64, src_ptr=array((128, 64)), dst_ptr=array((128, 64), pointer=BASE + 2**20),
                     scale=1.5, flag=True, count=3, big=2**40, row_stride=64, col_stride=1)
    arguments.update(changes)
    return arguments


class FakeSide(plan.DeviceSide):
    """The GPU side of a plan without a GPU. Launches are recorded, decoded (``Launch``); tensor map ``i`` (in
    encoding order) is 128 copies of byte ``i``; the function of device ``d`` is ``0xF00 + d`` and its context
    ``0xC0 + d``. With ``record`` off, launches are only counted."""

    def __init__(self):
        self.device, self.stream, self.current_context = 0, 0, 0
        self.launches, self.encoded, self.code, self.record, self.count = [], [], 0, True, 0
        self.layouts = {}  # function handle -> (scalar and pointer slots, tensor maps, trailing int slots)
        self.launch_kernel_ex, self.ctx_get_current = self._launch, self._get_context

    def device_getter(self, torch_arrays):
        return lambda: self.device

    def stream_getter(self, torch_arrays):
        return lambda device: self.stream

    def function(self, built, device):
        generated = built.generated
        self.layouts[0xF00 + device] = (len(generated.kernel.params), len(generated.tensor_maps),
                                        2 if generated.block_group else 0)
        return 0xF00 + device

    def context(self, device):
        self.current_context = 0xC0 + device
        return self.current_context

    def restore_context(self, handle):
        self.current_context = handle

    def tensor_map(self, dtype, address, shape, strides_bytes, box, swizzle_bytes, l2_promotion):
        from warpspec.cuda.driver import check_tiled_tensor_map

        check_tiled_tensor_map(dtype, address, shape, strides_bytes, box, swizzle_bytes, l2_promotion)
        self.encoded.append((address, shape, strides_bytes, box, swizzle_bytes))
        return bytes([len(self.encoded)]) * 128

    def entry_points(self):
        return self

    def _get_context(self, address):
        ctypes.c_void_p.from_address(address).value = self.current_context
        return 0

    def _launch(self, config, function, params, extra):
        self.count += 1
        if self.record:
            self.launches.append(Launch(LaunchConfig.from_address(config), function, params,
                                        self.layouts[function], self.current_context))
        return self.code


class Launch:
    """What one recorded launch handed the driver, decoded and copied at the time of the launch."""

    def __init__(self, cfg, function, params, layout, context_handle):
        self.grid = (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ)
        self.block = (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ)
        self.shared, self.stream, self.function = cfg.sharedMemBytes, cfg.hStream or 0, function
        self.context = context_handle
        self.cluster = None
        if cfg.numAttrs:
            attribute = LaunchAttribute.from_address(cfg.attrs)
            self.cluster = (attribute.id, struct.unpack_from("<3I", bytes(attribute.value)))
        scalars, maps, trailing = layout
        addresses = list((ctypes.c_void_p * (scalars + maps + trailing)).from_address(params))
        self.addresses = addresses
        self.slots = [ctypes.string_at(address, 128 if scalars <= i < scalars + maps else 8)
                      for i, address in enumerate(addresses)]

    def slot(self, index: int, fmt: str):
        """Parameter ``index`` read as struct format ``fmt``."""
        return struct.unpack_from("<" + fmt, self.slots[index])[0]

    def map_bytes(self, index: int) -> bytes:
        return self.slots[index]


@pytest.fixture
def side(monkeypatch):
    """The fake GPU side for every plan, the CUDA back end selected, and builds that skip NVRTC."""
    fake = FakeSide()
    monkeypatch.setattr(plan, "_default_side", fake)
    monkeypatch.setattr(launch, "compile_cuda", lambda source, **options: CompiledModule(b"", "", "fake", False))
    with warpspec.use_backend("cuda"):
        yield fake


def test_a_launch_hands_the_driver_what_the_kernel_needs(side):
    side.stream = 0x5000
    Probe(cluster=2)(**good(m_size=200, row_stride=72, src_ptr=array((200, 72)), scale=-0.1, count=2**32 - 1,
                            big=-2**63, flag=False, dst_ptr=array((200, 64), pointer=BASE + 2**20)))
    [call] = side.launches
    assert call.grid == (4, 1, 1) and call.block == (64, 1, 1) and call.stream == 0x5000
    assert call.function == 0xF00 and call.context == 0xC0
    assert call.shared == launch.compile_kernel(warpspec.runtime.kernel_for(Probe(cluster=2), {"n_size": 64})) \
        .generated.shared_bytes
    assert call.cluster == (CLUSTER_DIMENSION, (2, 1, 1))
    # Parameters in kernel order (m_size, src, dst, scale, flag, count, big, row_stride, col_stride), then maps.
    assert call.slot(0, "i") == 200
    assert call.slot(1, "Q") == BASE and call.slot(2, "Q") == BASE + 2**20
    assert call.slot(3, "f") == np.float32(-0.1)
    assert call.slot(4, "?") is False and call.slot(5, "I") == 2**32 - 1 and call.slot(6, "q") == -2**63
    assert call.slot(7, "i") == 72 and call.slot(8, "i") == 1
    # Tensor maps: innermost dimension first, byte strides, the tile's box and its 128-byte swizzle.
    assert side.encoded == [(BASE, (64, 200), (144,), (64, 64), 128), (BASE + 2**20, (64, 200), (128,), (64, 64), 128)]
    assert call.map_bytes(9) == bytes([1]) * 128 and call.map_bytes(10) == bytes([2]) * 128
    assert all(address % 64 == 0 for address in call.addresses[9:11])


def test_the_plan_entry_takes_positional_calls_and_defaults(side):
    kernel = Probe()
    arguments = good()
    positional = tuple(arguments.values())[:-1]  # col_stride from its default
    kernel(*positional)
    kernel(*positional)
    kernel(*tuple(arguments.values()))
    assert len(side.launches) == 3 and len(kernel._warpspec_calls) == 2
    assert all(call.slot(8, "i") == 1 for call in side.launches)
    assert "def call(args):" in kernel._warpspec_calls[0].source


OLD_MESSAGES = {
    "m_size=2**31": (dict(m_size=2**31), "argument 'm_size': 2147483648 does not fit in int32"),
    "m_size=1.5": (dict(m_size=1.5), "argument 'm_size': expected a int32 integer, got 1.5"),
    "m_size=True": (dict(m_size=True), "argument 'm_size': expected a int32 integer, got True"),
    "m_size='7'": (dict(m_size="7"), "argument 'm_size': expected a int32 integer, got '7'"),
    "scale='x'": (dict(scale="x"), "argument 'scale': expected a float32 number, got 'x'"),
    "scale=True": (dict(scale=True), "argument 'scale': expected a float32 number, got True"),
    "flag=2": (dict(flag=2), "argument 'flag': expected a boolean, got 2"),
    "flag=1.0": (dict(flag=1.0), "argument 'flag': expected a boolean, got 1.0"),
    "count=-1": (dict(count=-1), "argument 'count': -1 does not fit in uint32"),
    "count=2**32": (dict(count=2**32), "argument 'count': 4294967296 does not fit in uint32"),
    "big=2**63": (dict(big=2**63), "argument 'big': 9223372036854775808 does not fit in int64"),
    "numpy array": (dict(src_ptr=np.zeros((128, 64), np.float16)),
                    "argument 'src_ptr' is a CPU array (ndarray), not GPU memory; move it to the GPU first (for "
                    "example torch.as_tensor(x, device='cuda'))"),
    "list": (dict(src_ptr=[1, 2]), "argument 'src_ptr': list object is not a GPU array; expected a torch CUDA "
                                   "tensor or an object with __cuda_array_interface__ or __dlpack__"),
    "float32 array": (dict(src_ptr=array((128, 64), "float32")),
                      "argument 'src_ptr': expected float16 elements for a ~float16 parameter, got float32"),
    "GPU 1": (dict(src_ptr=array((128, 64), device=1)),
              "argument 'dst_ptr' is on GPU 0 but argument 'src_ptr' is on GPU 1: every array of one launch must "
              "be on the same GPU"),
    "too small": (dict(src_ptr=array((100, 64))),
                  f"argument 'src_ptr' holds 6400 elements but the kernel views it as src of shape [128, 64] (line "
                  f"{SRC_LINE}), which needs 8192"),
    "1-D too small": (dict(src_ptr=array((8191,))),
                      f"argument 'src_ptr' holds 8191 elements but the kernel views it as src of shape [128, 64] "
                      f"(line {SRC_LINE}), which needs 8192"),
    "3-D too small": (dict(dst_ptr=array((2, 8, 64), pointer=BASE + 2**20)),
                      f"argument 'dst_ptr' holds 1024 elements but the kernel views it as dst of shape [128, 64] "
                      f"(line {DST_LINE}), which needs 8192"),
    "m_size=0": (dict(m_size=0), f"the kernel's grid is [0, 1, 1] (self.attrs.blocks at {__file__}:{BLOCKS_LINE}): "
                                 f"blocks.x must be positive for these arguments"),
    "m_size=-5": (dict(m_size=-5), "argument 'src_ptr': view src has negative shape [-5, 64]"),
    "misaligned": (dict(src_ptr=array((128, 64), pointer=BASE + 8)),
                   "argument 'src_ptr' (view src): tensor map: global_address 0x7f0000000008 must be a non-null "
                   "device address aligned to 16 bytes (it is 8 bytes past a 16-byte boundary)"),
    "row stride 60": (dict(row_stride=60),
                      "argument 'src_ptr' (view src): tensor map: global_strides_bytes[0] = 120 (stride of dimension "
                      "1) must be a positive multiple of 16 below 2^40"),
    "column stride 2": (dict(col_stride=2, src_ptr=array((128, 128))),
                        "argument 'src_ptr': TMA needs the innermost dimension of src to be contiguous (stride 1), "
                        "got stride 2"),
    "n_size=0": (dict(n_size=0), "argument 'src_ptr' (view src): tensor map: global_shape[0] = 0 must be in "
                                 "[1, 2^32]"),
    "n_size=64.0": (dict(n_size=64.0), "Probe: argument 'n_size' is compile-time int, got float 64.0"),
    "n_size=True": (dict(n_size=True), "Probe: argument 'n_size' is compile-time int, got bool True"),
}


@pytest.mark.parametrize("name", OLD_MESSAGES)
def test_bad_arguments_are_refused_with_the_messages_of_the_launch_path(side, name):
    change, message = OLD_MESSAGES[name]
    bad = good(**change)
    fresh, warmed = Probe(), Probe()
    warmed(**good())
    warmed(*good().values())  # now a plan and its positional entry exist: the bad call meets them first
    for kernel in (fresh, warmed):
        for call in (lambda: kernel(**bad), lambda: kernel(*bad.values())):
            with pytest.raises(ArgumentError) as raised:
                call()
            assert str(raised.value) == message
    assert len(side.launches) == 2


def test_a_grid_that_is_no_multiple_of_the_cluster_is_refused(side):
    kernel = Probe(cluster=2)
    kernel(**good(m_size=128))
    for _ in range(2):
        with pytest.raises(ArgumentError) as raised:
            kernel(*good(m_size=64).values())
        assert str(raised.value) == (f"grid [1, 1, 1] (self.attrs.blocks at {__file__}:{BLOCKS_LINE}) is not a "
                                     f"multiple of the cluster shape [2, 1, 1] in dimension x")
    assert len(side.launches) == 1


@pytest.mark.parametrize("call, message", [
    (lambda: Probe()(*range(12)), "Probe takes 10 arguments (m_size, n_size, src_ptr, dst_ptr, scale, flag, count, "
                                  "big, row_stride, col_stride), got 12"),
    (lambda: Probe()(1, 2), "Probe: missing argument 'src_ptr'"),
    (lambda: Probe()(**good(), zz=1), "Probe has no parameter 'zz'; parameters: m_size, n_size, src_ptr, dst_ptr, "
                                      "scale, flag, count, big, row_stride, col_stride"),
    (lambda: Probe()(128, **good()), "Probe: argument 'm_size' given twice"),
])
def test_binding_errors_are_unchanged(side, call, message):
    with pytest.raises(ArgumentError) as raised:
        call()
    assert str(raised.value) == message


def test_a_changed_dtype_device_rank_or_compile_time_value_gets_its_own_plan(side):
    kernel = Probe()
    built = launch.compile_kernel(warpspec.runtime.kernel_for(kernel, {"n_size": 64}))
    kernel(*good().values())
    assert len(built.plans) == 1
    # dtype: refused, never launched through the float16 plan
    with pytest.raises(ArgumentError, match="expected float16 elements"):
        kernel(*good(src_ptr=array((128, 64), "float32")).values())
    # rank: the same elements as a 1-D array need the plan's span computed for rank 1
    kernel(*good(src_ptr=array((128 * 64,))).values())
    with pytest.raises(ArgumentError, match="holds 8191 elements"):
        kernel(*good(src_ptr=array((8191,))).values())
    assert len(built.plans) == 2 and len(side.launches) == 2
    # device: arrays on GPU 1 launch on GPU 1 (the current device stays 0), through a plan for it
    on_one = good(src_ptr=array((128, 64), device=1), dst_ptr=array((128, 64), device=1, pointer=BASE + 2**20))
    kernel(*on_one.values())
    assert len(built.plans) == 3 and side.launches[-1].function == 0xF01 and side.launches[-1].context == 0xC1
    with pytest.raises(ArgumentError, match="argument 'dst_ptr' is on GPU 0 but argument 'src_ptr' is on GPU 1"):
        kernel(*good(src_ptr=array((128, 64), device=1)).values())
    # compile-time value: another kernel, its own build and plan; the grid and maps follow the new n_size
    kernel(*good(n_size=128, src_ptr=array((128, 128)), dst_ptr=array((128, 128), pointer=BASE + 2**20),
                 row_stride=128).values())
    assert side.encoded[-1] == (BASE + 2**20, (128, 128), (256,), (64, 64), 128)
    assert len(built.plans) == 3 and len(side.launches) == 4
    assert len(launch.compile_kernel(warpspec.runtime.kernel_for(kernel, {"n_size": 128})).plans) == 1
    # and the first plan still serves its own arguments
    kernel(*good().values())
    assert side.launches[-1].function == 0xF00 and side.launches[-1].slot(0, "i") == 128


def test_compile_time_values_are_matched_with_their_python_type(side):
    class Scaled(warpspec.Script):
        def __call__(self, n: int32, factor: float, x_ptr: ~float32):
            self.attrs.blocks = [cdiv(n, 128)]
            self.attrs.warps = 4
            self.global_view(x_ptr, dtype=float32, shape=[n])

    kernel = Scaled()
    x = array((256,), "float32")
    kernel(256, 2, x)
    kernel(256, 2.0, x)  # the same kernel (2 converts to 2.0), reached by the general path once
    kernel(256, 2.0, x)
    assert len(kernel._warpspec_calls) == 2 and len(side.launches) == 3
    assert len(kernel._warpspec_kernels) == 1


def test_tensor_maps_are_encoded_once_per_pointer_and_shape(side):
    kernel = Probe()
    first, second = good(), good(src_ptr=array((128, 64), pointer=BASE + 2**22))
    kernel(*first.values())
    kernel(*first.values())
    assert len(side.encoded) == 2  # src and dst, once
    kernel(*second.values())
    assert len(side.encoded) == 3 and side.encoded[-1][0] == BASE + 2**22
    assert side.launches[-1].map_bytes(9) == bytes([3]) * 128
    kernel(*first.values())  # back to the first pointer: cached, and written back into the buffer
    assert len(side.encoded) == 3 and side.launches[-1].map_bytes(9) == bytes([1]) * 128
    kernel(*good(m_size=100, src_ptr=array((100, 64))).values())  # another view shape: another map
    assert side.encoded[-2:] == [(BASE, (64, 100), (128,), (64, 64), 128),
                                 (BASE + 2**20, (64, 100), (128,), (64, 64), 128)]


def test_float32_scalars_are_passed_as_ctypes_rounds_them(side):
    kernel = Probe()
    for value, expected in [(1e39, float("inf")), (-1e39, float("-inf")), (3, 3.0), (np.float32(0.25), 0.25),
                            (0.1, float(np.float32(0.1)))]:
        kernel(*good(scale=value).values())
        assert side.launches[-1].slot(3, "f") == expected


def test_the_stream_the_context_and_a_refused_launch(side):
    kernel = Probe()
    kernel(*good().values())
    side.stream = 0x77
    side.current_context = 0xBAD  # another context became current in this thread: the plan's is made current
    kernel(*good().values())
    assert side.launches[-1].stream == 0x77 and side.launches[-1].context == 0xC0
    launch.launch_kernel(warpspec.runtime.kernel_for(kernel, {"n_size": 64}),
                         {k: v for k, v in good().items() if k != "n_size"}, stream=0x99)
    assert side.launches[-1].stream == 0x99
    side.code = 1  # CUDA_ERROR_INVALID_VALUE
    with pytest.raises(Exception) as raised:
        kernel(*good().values())
    assert type(raised.value).__name__ == "CudaError"
    assert str(raised.value).startswith("launching 'Probe' (grid (2, 1, 1), block (64, 1, 1), cluster None, ")
    assert str(raised.value).endswith("B shared): CUDA_ERROR_INVALID_VALUE")


def test_grouped_launch_order_flattens_the_grid_and_passes_its_shape(side):
    from matmul_v3 import MatmulWGMMAV3

    from warpspec.cuda.codegen import generate

    kernel = warpspec.runtime.kernel_for(MatmulWGMMAV3(num_stages=2, block_m=128, block_n=64, block_k=64),
                                         {"n_size": 256, "k_size": 128})
    built = launch.BuiltKernel(generate(kernel, block_group=8), CompiledModule(b"", "", "fake", False))
    arguments = dict(m_size=300, a_ptr=array((300, 128)), b_ptr=array((256, 128), pointer=BASE + 2**20),
                     c_ptr=array((300, 256), pointer=BASE + 2**21))
    launch.launch_kernel(kernel, arguments, built=built)
    [call] = side.launches
    assert call.grid == (3 * 4, 1, 1)
    # m_size, a, b, c, the two maps (A and B loads), then grid_x and grid_y
    assert call.slot(0, "i") == 300 and call.slot(3, "Q") == BASE + 2**21
    assert call.slot(6, "i") == 3 and call.slot(7, "i") == 4


def test_a_bound_launch_is_the_call_with_other_addresses(side):
    kernel = Probe(cluster=2)
    first = good(m_size=200, row_stride=72, src_ptr=array((200, 72)), scale=0.1, dst_ptr=array((200, 64),
                 pointer=BASE + 2**20))
    kernel(*first.values())
    bound = warpspec.runtime.pointer_launcher(kernel, tuple(first.values()))
    moved = dict(first, src_ptr=array((200, 72), pointer=BASE + 2**22), dst_ptr=array((200, 64), pointer=BASE + 2**23))
    kernel(*moved.values())
    side.stream = 0x42
    kernel(*moved.values())
    bound(BASE + 2**22, BASE + 2**23)  # the arrays' addresses, in the order of the Script's parameters
    called, launched = side.launches[-2:]
    assert launched.slots == called.slots and launched.slots[1] != side.launches[0].slots[1]
    assert (launched.grid, launched.block, launched.shared, launched.cluster, launched.stream, launched.context) == \
        (called.grid, called.block, called.shared, called.cluster, 0x42, 0xC0)
    bound(BASE + 2**22, BASE + 2**23, stream=0x99)
    assert side.launches[-1].stream == 0x99 and len(side.encoded) == 4  # the maps of both address pairs, once


def test_binding_makes_the_launch_checks_and_refuses_another_signature(side):
    kernel = Probe()
    kernel(*good().values())
    with pytest.raises(ArgumentError, match="argument 'count': -1 does not fit in uint32"):
        warpspec.runtime.pointer_launcher(kernel, tuple(good(count=-1).values()))
    other = good(src_ptr=array((128, 64), dtype="float32"))  # no plan of this signature launched yet
    assert warpspec.runtime.pointer_launcher(kernel, tuple(other.values())) is None
    with warpspec.debug(True):
        assert warpspec.runtime.pointer_launcher(kernel, tuple(good().values())) is None
    with warpspec.use_backend("emulator"):
        assert warpspec.runtime.pointer_launcher(kernel, tuple(good().values())) is None
    plan_of = launch.compile_kernel(warpspec.runtime.kernel_for(kernel, {"n_size": 64})).plans[0]
    with pytest.raises(ValueError, match="must name each array parameter once"):
        plan_of.bind({k: v for k, v in good().items() if k != "n_size"}, ("src_ptr",))


def test_the_emulator_never_takes_a_plan(side):
    kernel = Probe()
    kernel(*good().values())
    with warpspec.use_backend("emulator"), pytest.raises(ArgumentError, match="expected a numpy array"):
        kernel(*good().values())
    assert len(side.launches) == 1


def assert_host_cost(kernel, arguments, side) -> None:
    """Calls after the first cost well under 40 us each on the host (the house timer, with the fake GPU side)."""
    side.record = False
    per_call = host_us_per_call(lambda: kernel(*arguments), synchronize=lambda: None, calls=2000, repeats=5)
    assert side.count == 1 + 1 + 2000 * 5  # the first call, the timer's warm-up, the timed loops
    assert per_call < 40, f"{per_call:.1f} us per call"


def test_a_call_costs_microseconds(side):
    """The host cost of a Script call through its plan entry, with the fake GPU side (whose launch is a Python
    method; the real one is a ctypes call). Before plans, the launch path cost about 170 us per call."""
    kernel = Probe()
    arguments = tuple(good().values())
    kernel(*arguments)
    assert_host_cost(kernel, arguments, side)


# ------------------------------------------------------------------------------------------- tuned Scripts

@warpspec.autotune("tile_m", [64, 128])
class TunedProbe(Probe):
    """Probe with its tile height left to the tuner."""


class Bench:
    """The tuner's GPU side: a fake identity and timing (tile 128 wins), the real launch (through plans, onto
    the fake GPU side); counts what the tuner asked for."""

    def __init__(self):
        self.identities = self.timings = 0

    def identity(self):
        self.identities += 1
        return {"gpu": "Fake H200", "compute_capability": "9.0", "driver": 13000}

    @contextmanager
    def timing(self):
        def measure(kernel, runtime, built):
            self.timings += 1
            return 1.0 if dict(kernel.constants)["tile_m"] == 128 else 2.0

        yield measure

    def launch(self, script, args, kwargs):
        run_script(script, args, kwargs)


@pytest.fixture
def tuning(side, monkeypatch, tmp_path):
    from warpspec.tune import tuner

    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(tmp_path))
    for name, value in vars(tuner.settings).items():
        monkeypatch.setattr(tuner.settings, name, value)
    monkeypatch.setattr(tuner, "compile_cuda", lambda source: CompiledModule(b"", "", "fake", False))
    bench = Bench()
    tuner.configure(bench=bench, workers=1)
    return bench


def test_a_tuned_script_finds_its_winner_without_the_general_path(tuning, side, monkeypatch):
    from warpspec.frontend import kernel as frontend

    kernel = TunedProbe()
    arguments = tuple(good().values())
    kernel(*arguments)
    assert tuning.timings == 2 and tuning.identities == 1 and kernel.last_report.winner.schedule == {"tile_m": 128}
    assert side.launches[-1].grid == (1, 1, 1)  # 128 rows, tile 128
    report = kernel.last_report

    def no_binding(*args, **kwargs):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(frontend, "bind_arguments", no_binding)
    kernel(*arguments)
    kernel(*good(m_size=100, src_ptr=array((100, 64)), dst_ptr=array((100, 64), pointer=BASE + 2**20)).values())
    assert kernel.last_report is report and len(side.launches) == 3 and side.launches[-1].slot(0, "i") == 100
    monkeypatch.undo()


def test_a_tuned_script_tunes_again_only_for_another_key(tuning, side):
    kernel = TunedProbe()
    kernel(*good().values())
    kernel(**good())  # keywords: the general path, same key
    kernel(*good(m_size=np.int64(128)).values())  # a numpy size: the general path decides, same key
    assert tuning.timings == 2 and len(side.launches) == 3
    bigger = good(m_size=300, src_ptr=array((300, 64)), dst_ptr=array((300, 64), pointer=BASE + 2**20))
    kernel(*bigger.values())  # bucket 512: tuned again
    assert tuning.timings == 4 and side.launches[-1].grid == (3, 1, 1)
    with pytest.raises(ArgumentError, match="expected float16 elements"):
        kernel(*good(src_ptr=array((128, 64), "float32")).values())
    assert len(side.launches) == 4


def test_a_tuned_call_costs_microseconds(tuning, side):
    """The winner's lookup and the launch through its plan (fake GPU side), per call."""
    kernel = TunedProbe()
    arguments = tuple(good().values())
    kernel(*arguments)
    assert_host_cost(kernel, arguments, side)


# --------------------------------------------------------------------------------------------- the house timer

def test_the_house_timer_runs_for_the_protocols_budgets(monkeypatch):
    from warpspec.tune import bench

    class Clock:
        """Every launch takes 2 ms; records what the timer did."""

        def __init__(self):
            self.events = []

        def flush(self):
            self.events.append("flush")

        def elapsed_ms(self, launch):
            launch()
            return 2.0

        def close(self):
            self.events.append("close")

    fake = Clock()
    monkeypatch.setattr(bench, "clock", lambda: fake)
    launches = []
    assert bench.time_ms(lambda: launches.append(1)) == 2.0
    # 1 warm-up and 5 timed calls estimate 2 ms; then 100 ms of warm-up (50 calls) and 500 ms timed (250 calls)
    assert len(launches) == 1 + 5 + 50 + 250
    assert fake.events.count("flush") == 5 + 250 and fake.events[-1] == "close"


# ------------------------------------------------------------------------------------ other GPU array kinds

class PretendCudaDLPack:
    """Forwards numpy's DLPack capsule but reports CUDA device 3, so the generic array path runs on the CPU."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return (2, 3)


def test_dlpack_producers_are_read_through_as_device_array_on_every_call(side):
    side.device = 3
    src, dst = np.zeros((128, 64), np.float16), np.zeros((128, 64), np.float16)
    kernel = Probe()
    arguments = good(src_ptr=PretendCudaDLPack(src), dst_ptr=PretendCudaDLPack(dst))
    kernel(*arguments.values())
    kernel(*arguments.values())
    assert [call.slot(1, "Q") for call in side.launches] == [src.ctypes.data] * 2
    assert side.launches[-1].function == 0xF03
    with pytest.raises(ArgumentError) as raised:
        kernel(*good(src_ptr=PretendCudaDLPack(np.zeros((128, 64), np.float32)), dst_ptr=arguments["dst_ptr"])
               .values())
    assert str(raised.value) == "argument 'src_ptr': expected float16 elements for a ~float16 parameter, got float32"
    with pytest.raises(ArgumentError) as raised:
        kernel(*good(src_ptr=PretendCudaDLPack(src[:100]), dst_ptr=arguments["dst_ptr"]).values())
    assert str(raised.value).startswith("argument 'src_ptr' holds 6400 elements")
    side.device = 0  # another current device: the launch still goes to the arrays' GPU 3
    kernel(*arguments.values())
    assert side.launches[-1].function == 0xF03 and side.launches[-1].context == 0xC3
    with pytest.raises(ArgumentError) as raised:
        kernel(*good(src_ptr=arguments["src_ptr"]).values())
    assert str(raised.value) == ("argument 'dst_ptr' is on GPU 0 but argument 'src_ptr' is on GPU 3: every array "
                                 "of one launch must be on the same GPU")
    assert len(side.launches) == 3


def test_a_winner_guard_takes_only_its_size_bucket(tuning, side):
    """The guard of the winner for m_size 128 (bucket (64, 128]) launches 65 and 128 without tuning; 64 and 129 are
    other buckets and tune again."""
    kernel = TunedProbe()

    def sized(m):
        return good(m_size=m, src_ptr=array((m, 64)), dst_ptr=array((m, 64), pointer=BASE + 2**20)).values()

    kernel(*sized(128))
    assert tuning.timings == 2 and len(kernel._warpspec_guards) == 1
    kernel(*sized(65))
    kernel(*sized(128))
    assert tuning.timings == 2 and len(side.launches) == 3 and side.launches[-2].slot(0, "i") == 65
    kernel(*sized(64))
    assert tuning.timings == 4 and len(kernel._warpspec_guards) == 2
    kernel(*sized(129))
    assert tuning.timings == 6 and len(kernel._warpspec_guards) == 3 and side.launches[-1].slot(0, "i") == 129
