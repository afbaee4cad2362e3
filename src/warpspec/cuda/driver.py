"""A thin layer over the CUDA driver (``cuda.bindings.driver``): context, modules, TMA tensor maps, launches and
the adapter that turns a user's GPU array (torch, ``__cuda_array_interface__``, DLPack) into a pointer + layout.

Nothing talks to the driver until it is needed, so importing this module works on a machine without a GPU, and
``as_device_array``'s rejections run there too (the tensor maps' rules are ``warpspec.arguments``', shared with
the emulator).

warpspec always works in the device's *primary* context, the one PyTorch and CuPy use, so pointers, streams and
events move freely between them and warpspec.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import hashlib
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cuda.bindings import driver as cu

from warpspec.arguments import (L2_PROMOTIONS, SWIZZLES, TENSOR_MAP_DTYPES, TiledTensorMapSpec,
                                check_tiled_tensor_map)
from warpspec.dtypes import BY_NAME, DType
from warpspec.errors import ArgumentError, WarpspecError


class CudaError(WarpspecError, RuntimeError):
    """A CUDA driver call failed (or the driver could not be loaded: then ``code`` is None). A warpspec error, so
    that a missing driver reads as one line, as every error warpspec raises on purpose does."""

    def __init__(self, message: str, code: Any = None):
        self.code = code
        super().__init__(message)


def check(result: tuple, what: str | None = None) -> Any:
    """Unwrap a cuda-bindings result tuple ``(CUresult, outputs...)``.

    Raises ``CudaError`` with the error's name and description (prefixed by ``what``, when given) unless the
    result is CUDA_SUCCESS; returns None, the single output, or a tuple of outputs.
    """
    error, *outputs = result
    if error != cu.CUresult.CUDA_SUCCESS:
        description = _error_string(error)
        raise CudaError(f"{what}: {description}" if what else description, error)
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _error_string(error) -> str:
    name = getattr(error, "name", str(error))
    try:
        described, text = cu.cuGetErrorString(error)
    except RuntimeError:  # no driver library to describe it: the enum's name still says what went wrong
        return name
    if described == cu.CUresult.CUDA_SUCCESS and text:
        return f"{name} ({text.decode(errors='replace')})"
    return name


# --------------------------------------------------------------------------------------------------- context

_lock = threading.RLock()
_initialised = False
_contexts: dict[int, Any] = {}  # device ordinal -> retained primary context


def _initialise() -> None:
    global _initialised
    if _initialised:
        return
    try:
        result = cu.cuInit(0)
    except RuntimeError as error:
        # Without libcuda, cuda-bindings raises at the first call instead of returning an error code: a plain
        # RuntimeError in 13.3, cuda.pathfinder's DynamicLibNotFoundError (a RuntimeError) in 13.5.
        # from None: the loader's own chain (library search paths) repeats what its message says.
        raise CudaError(
            f"the CUDA driver library could not be loaded (is an NVIDIA driver installed?): {error}") from None
    check(result, "cuInit")
    _initialised = True


_selected = threading.local()  # .device: the current device set by ``use_device`` where PyTorch runs no CUDA


def default_device() -> int:
    """PyTorch's current device when PyTorch has initialised CUDA (so both work on the same GPU), else the device
    ``use_device`` selects in this thread, else 0."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        # torch._C's getter is what torch.cuda.current_device() returns once CUDA is initialised, without the
        # Python wrapper's lazy-initialisation check: this runs on every launch.
        getter = getattr(torch._C, "_cuda_getDevice", None)
        return getter() if getter is not None else torch.cuda.current_device()
    return getattr(_selected, "device", 0)


@contextlib.contextmanager
def use_device(device: int):
    """``with use_device(1):`` makes ``device`` the current device for the block: PyTorch's (``torch.cuda.device``)
    when PyTorch has initialised CUDA, else the one ``default_device`` returns in this thread. For work that asks
    for the current device (tuning's timing, events and device identity) done for arrays on another GPU."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        with torch.cuda.device(device):
            yield
        return
    saved = getattr(_selected, "device", None)
    _selected.device = device
    try:
        yield
    finally:
        if saved is None:
            del _selected.device
        else:
            _selected.device = saved


def array_device(obj: Any, name: str) -> int:
    """The GPU index of GPU array ``obj`` (argument ``name``): a torch CUDA tensor's ``get_device()`` (no
    conversion), else ``as_device_array``'s (which raises ``ArgumentError`` for what is no GPU array)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor) and obj.is_cuda:
        return obj.get_device()
    return as_device_array(obj, name).device_index


def default_stream(device: int) -> int:
    """The CUstream handle warpspec launches on by default: PyTorch's current stream on ``device`` when PyTorch
    has initialised CUDA (so tensors made just before are ready without a sync, and ``torch.cuda.graph`` captures
    the launch), else 0 (the legacy default stream)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        return raw(device) if raw is not None else torch.cuda.current_stream(device).cuda_stream
    return 0


def context(device: int | None = None) -> Any:
    """Make the primary context of ``device`` (default: PyTorch's current device, else 0) current in this
    thread and return it. The context is retained once and kept for the life of the process."""
    if device is None:
        device = default_device()
    with _lock:
        ctx = _contexts.get(device)
        if ctx is None:
            _initialise()
            handle = check(cu.cuDeviceGet(device), f"cuDeviceGet({device})")
            ctx = check(cu.cuDevicePrimaryCtxRetain(handle), "cuDevicePrimaryCtxRetain")
            _contexts[device] = ctx
    # The current context is per thread, so every caller checks it; setting it is skipped when already right.
    if int(check(cu.cuCtxGetCurrent())) != int(ctx):
        check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


def set_current_context(handle: int) -> None:
    """Make the context ``handle`` (a CUcontext's value, as ``cuCtxGetCurrent`` gives it) current in this
    thread."""
    check(cu.cuCtxSetCurrent(cu.CUcontext(handle)), "cuCtxSetCurrent")


@contextlib.contextmanager
def on_device(device: int):
    """``with on_device(1):`` makes ``device``'s primary context current in this thread for the block, then puts
    back the context that was current before (PyTorch reads the current context as its current device, so work
    on another GPU must leave it as it was). Yields the context."""
    found = int(check(cu.cuCtxGetCurrent())) if _initialised else 0
    ctx = context(device)
    try:
        yield ctx
    finally:
        if found and found != int(ctx):
            set_current_context(found)


def has_hopper_gpu() -> bool:
    """Whether warpspec's device (see ``context``) is a compute capability 9.x GPU. Never raises."""
    try:
        _initialise()
        if check(cu.cuDeviceGetCount()) == 0:
            return False
        device = check(cu.cuDeviceGet(default_device()))
        major = check(cu.cuDeviceGetAttribute(
            cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device))
        return major == 9
    except Exception:  # noqa: BLE001 - a missing or broken driver stack fails in many ways; all mean "no".
        return False


# --------------------------------------------------------------------------------------------- modules

class Function:
    """A kernel of a loaded module. ``handle`` is the driver's CUfunction."""

    def __init__(self, module: Module, name: str, handle: Any):
        self.module = module
        self.name = name
        self.handle = handle
        self._max_dynamic_shared = 48 * 1024  # what every kernel may use without opting in

    def _attribute(self, attribute) -> int:
        return check(cu.cuFuncGetAttribute(attribute, self.handle), f"cuFuncGetAttribute({attribute.name})")

    @property
    def num_regs(self) -> int:
        """Registers per thread, as loaded."""
        return self._attribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS)

    @property
    def attributes(self) -> dict[str, int]:
        """Every CU_FUNC_ATTRIBUTE_* the driver reports for this kernel, keyed by the lower-case name without the
        prefix (``num_regs``, ``shared_size_bytes``, ``max_dynamic_shared_size_bytes``, ...)."""
        values = {}
        for attribute in cu.CUfunction_attribute:
            if attribute.name == "CU_FUNC_ATTRIBUTE_MAX":
                continue
            result = cu.cuFuncGetAttribute(attribute, self.handle)
            # Attributes newer than the installed driver answer with an error: they are simply left out.
            if result[0] == cu.CUresult.CUDA_SUCCESS:
                values[attribute.name.removeprefix("CU_FUNC_ATTRIBUTE_").lower()] = result[1]
        return values

    def set_max_dynamic_shared(self, nbytes: int) -> None:
        """Allow launches with up to ``nbytes`` of dynamic shared memory (needed above 48 KiB).

        Raises ``ArgumentError`` when the device cannot give that much next to the kernel's static shared memory.
        """
        context(self.module.device)
        device = check(cu.cuDeviceGet(self.module.device))
        optin = check(cu.cuDeviceGetAttribute(
            cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device))
        static = self._attribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
        if nbytes + static > optin:
            raise ArgumentError(
                f"kernel {self.name!r} asks for {nbytes} bytes of dynamic shared memory, but the device allows "
                f"{optin} per block and the kernel has {static} static: at most {optin - static} dynamic")
        check(cu.cuFuncSetAttribute(
            self.handle, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes),
            f"setting {self.name!r}'s dynamic shared memory to {nbytes} bytes")
        self._max_dynamic_shared = nbytes


class Module:
    """A cubin loaded into a device's primary context; ``function(name)`` looks up its kernels."""

    def __init__(self, handle: Any, device: int, key: str):
        self.handle = handle
        self.device = device
        self.key = key
        self._functions: dict[str, Function] = {}

    def function(self, name: str) -> Function:
        """The kernel called ``name`` (its ``extern "C"`` name); raises ``CudaError`` if there is none."""
        with _lock:
            found = self._functions.get(name)
            if found is None:
                context(self.device)
                handle = check(cu.cuModuleGetFunction(self.handle, name.encode()), f"looking up kernel {name!r}")
                found = self._functions[name] = Function(self, name, handle)
            return found


_modules: dict[tuple[int, str], Module] = {}


def load_module(cubin: bytes, device: int | None = None) -> Module:
    """Load ``cubin`` on ``device`` (default as in ``context``). The same cubin is loaded once per device;
    modules stay loaded for the life of the process (kernels are few and small)."""
    if device is None:
        device = default_device()
    key = hashlib.sha256(cubin).hexdigest()
    with _lock:
        module = _modules.get((device, key))
        if module is None:
            context(device)
            handle = check(cu.cuModuleLoadData(cubin), "cuModuleLoadData")
            module = _modules[(device, key)] = Module(handle, device, key)
        return module


# ----------------------------------------------------------------------------------------- tensor maps

_MAX_TENSOR_MAPS = 256


@dataclass(frozen=True, eq=False)
class TensorMap:
    """An encoded 128-byte CUtensorMap, passed to a kernel by value (``const __grid_constant__`` parameter).

    cuda-bindings keeps the 128 bytes at an address that is not 64-byte aligned (cuda.h asks for 64); the driver
    (580, CUDA 13.0) encodes into it all the same, and the kernel receives an aligned copy as its parameter.
    """

    handle: Any  # cu.CUtensorMap
    spec: TiledTensorMapSpec

    @property
    def address(self) -> int:
        """Host address of the 128 bytes."""
        return self.handle.getPtr()

    def to_bytes(self) -> bytes:
        """The 128 opaque bytes."""
        return ctypes.string_at(self.address, 128)


_tensor_maps: collections.OrderedDict[TiledTensorMapSpec, TensorMap] = collections.OrderedDict()


def encode_tiled_tensor_map(
    dtype: DType,
    global_address: int,
    global_shape: Sequence[int],
    global_strides_bytes: Sequence[int],
    box: Sequence[int],
    swizzle_bytes: int = 0,
    l2_promotion: int = 128,
) -> TensorMap:
    """Encode a TMA descriptor for a tiled copy (``cuTensorMapEncodeTiled``).

    Every array is innermost dimension first: ``global_shape`` in elements, ``global_strides_bytes`` the byte
    strides of dimensions 1..rank-1 (dimension 0 is contiguous), ``box`` the tile in elements. ``swizzle_bytes``
    is 0, 32, 64 or 128; ``l2_promotion`` 0, 64, 128 or 256 bytes (a hint). Out-of-bounds elements load as zero.
    Arguments are checked first (``check_tiled_tensor_map``). The last few hundred maps are kept, so relaunching
    on the same pointer and shape costs no driver call.
    """
    spec = check_tiled_tensor_map(dtype, global_address, global_shape, global_strides_bytes, box, swizzle_bytes,
                                  l2_promotion)
    with _lock:
        cached = _tensor_maps.get(spec)
        if cached is not None:
            _tensor_maps.move_to_end(spec)
            return cached
    context()
    rank = len(spec.global_shape)
    handle = check(cu.cuTensorMapEncodeTiled(
        getattr(cu.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + TENSOR_MAP_DTYPES[spec.dtype.name]),
        rank,
        spec.global_address,
        # Array arguments must be wrapped: cuda-bindings 13.5 rejects plain ints there.
        [cu.cuuint64_t(extent) for extent in spec.global_shape],
        [cu.cuuint64_t(stride) for stride in spec.global_strides_bytes],
        [cu.cuuint32_t(extent) for extent in spec.box],
        [cu.cuuint32_t(1)] * rank,  # element strides: every element of the box
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(cu.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + SWIZZLES[spec.swizzle_bytes]),
        getattr(cu.CUtensorMapL2promotion, "CU_TENSOR_MAP_L2_PROMOTION_" + L2_PROMOTIONS[spec.l2_promotion]),
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    ), f"cuTensorMapEncodeTiled({spec})")
    tensor_map = TensorMap(handle, spec)
    with _lock:
        _tensor_maps[spec] = tensor_map
        while len(_tensor_maps) > _MAX_TENSOR_MAPS:
            _tensor_maps.popitem(last=False)
    return tensor_map


# ------------------------------------------------------------------------------------------------ launch

@dataclass(frozen=True)
class DeviceArray:
    """A GPU array seen as a device pointer and an element layout; ``strides_elements`` are in elements."""

    pointer: int
    shape: tuple[int, ...]
    strides_elements: tuple[int, ...]
    dtype_name: str
    device_index: int

    @property
    def dtype(self) -> DType:
        """The warpspec dtype of the elements."""
        return BY_NAME[self.dtype_name]


KernelParam = TensorMap | DeviceArray | int | ctypes._SimpleCData | ctypes.Structure


def _kernel_params(params: Sequence[KernelParam]) -> tuple[Any, list]:
    """The kernelParams array (one host pointer per parameter) and the values it points to, which must stay
    alive until the launch call returns (the driver copies them during the call)."""
    keep_alive: list = []
    pointers = (ctypes.c_void_p * len(params))()
    for i, param in enumerate(params):
        if isinstance(param, TensorMap):
            keep_alive.append(param)
            pointers[i] = param.address
            continue
        if isinstance(param, DeviceArray):
            value = ctypes.c_uint64(param.pointer)
        elif isinstance(param, int) and not isinstance(param, bool):
            if not 0 <= param < 2**64:
                raise ArgumentError(f"kernel parameter {i}: {param} is not a device pointer (0 <= p < 2^64); "
                                    f"pass scalars as ctypes values such as ctypes.c_int32({param})")
            value = ctypes.c_uint64(param)
        elif isinstance(param, (ctypes._SimpleCData, ctypes.Structure)):
            value = param
        else:
            raise ArgumentError(
                f"kernel parameter {i}: {type(param).__name__} {param!r} cannot be passed; expected a TensorMap, "
                f"a DeviceArray or int (device pointer), or a ctypes scalar such as ctypes.c_int32 / c_float")
        keep_alive.append(value)
        pointers[i] = ctypes.addressof(value)
    return pointers, keep_alive


def _dims(value: Sequence[int], label: str) -> tuple[int, int, int]:
    dims = tuple(int(v) for v in value)
    if len(dims) != 3 or min(dims) < 1:
        raise ArgumentError(f"launch: {label} must be three positive integers (x, y, z), got {value!r}")
    return dims  # type: ignore[return-value]


def _stream_handle(stream: int | None, device: int) -> int:
    return int(stream) if stream is not None else default_stream(device)


def launch(
    function: Function,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    shared_bytes: int,
    params: Sequence[KernelParam],
    cluster: tuple[int, int, int] | None = None,
    stream: int | None = None,
) -> None:
    """Launch ``function`` with ``shared_bytes`` of dynamic shared memory (``cuLaunchKernelEx``).

    ``params`` has one entry per kernel parameter, in order:

    - ``TensorMap``: its 128 bytes by value (a ``const __grid_constant__`` 128-byte struct parameter);
    - ``DeviceArray`` or ``int``: a device pointer, passed as 64 bits;
    - a ctypes value (``ctypes.c_int32``, ``c_uint32``, ``c_int64``, ``c_float``, ... or a ``Structure``): by
      value with exactly that type, which must match the kernel's declaration. Plain Python floats and bools are
      refused because their width is ambiguous.

    ``cluster`` (x, y, z) launches thread-block clusters; each grid dimension must be a multiple of it.
    ``stream`` is a CUstream handle; by default PyTorch's current stream when PyTorch uses CUDA, else stream 0.
    Dynamic shared memory above 48 KiB is opted into automatically.
    """
    grid = _dims(grid, "grid")
    block = _dims(block, "block")
    config = cu.CUlaunchConfig()
    if cluster is not None:
        cluster = _dims(cluster, "cluster")
        for axis, g, c in zip("xyz", grid, cluster, strict=True):
            if g % c:
                raise ArgumentError(f"launch: grid.{axis} = {g} is not a multiple of cluster.{axis} = {c}")
        attribute = cu.CUlaunchAttribute()
        attribute.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z = cluster
        config.attrs = [attribute]
        config.numAttrs = 1
    if shared_bytes > function._max_dynamic_shared:
        function.set_max_dynamic_shared(shared_bytes)
    context(function.module.device)
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = shared_bytes
    config.hStream = cu.CUstream(_stream_handle(stream, function.module.device))
    pointers, _values = _kernel_params(params)
    check(cu.cuLaunchKernelEx(config, function.handle, ctypes.addressof(pointers), 0),
          f"launching {function.name!r} (grid {grid}, block {block}, cluster {cluster}, {shared_bytes} B shared)")


# ------------------------------------------------------------------------------------ per-launch entry points

class LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig`` (cuda.h), the first argument of ``cuLaunchKernelEx``: a launch plan keeps one, with its
    cluster attribute set once, and rewrites the grid, block, shared bytes and stream with one pack per launch."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


class LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute`` (cuda.h): an attribute id, then (8-byte aligned) a 64-byte value union whose first
    three unsigned ints are ``clusterDim.x, .y, .z``."""

    _fields_ = [("id", ctypes.c_int), ("value", ctypes.c_uint64 * 8)]


#: ``CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION``, as cuda-bindings numbers it.
CLUSTER_DIMENSION = int(cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)


class EntryPoints:
    """``cuLaunchKernelEx`` and ``cuCtxGetCurrent`` called through ctypes, for the two driver calls every launch
    makes: cuda-bindings' wrappers convert their arguments into Python objects and cost microseconds each, a
    ctypes call with integer handles a fraction of one. The addresses come from ``cuGetProcAddress`` of the
    driver cuda-bindings loaded (legacy default stream semantics, as cuda-bindings uses), so both talk to one
    driver library."""

    def __init__(self):
        _initialise()
        prototype = ctypes.CFUNCTYPE
        self.launch_kernel_ex = prototype(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                          ctypes.c_void_p)(self._address(b"cuLaunchKernelEx", 11080))
        self.ctx_get_current = prototype(ctypes.c_int, ctypes.c_void_p)(self._address(b"cuCtxGetCurrent", 4000))

    @staticmethod
    def _address(symbol: bytes, version: int) -> int:
        found = check(cu.cuGetProcAddress(symbol, version,
                                          cu.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_LEGACY_STREAM),
                      f"cuGetProcAddress({symbol.decode()})")
        pointer = found[0] if isinstance(found, tuple) else found  # (pfn, symbolStatus), or pfn alone
        if not int(pointer):
            raise CudaError(f"the CUDA driver has no {symbol.decode()}")
        return int(pointer)


_entry_points: EntryPoints | None = None


def entry_points() -> EntryPoints:
    """The process's ``EntryPoints``, resolved at the first call."""
    global _entry_points
    with _lock:
        if _entry_points is None:
            _entry_points = EntryPoints()
        return _entry_points


def error_name(code: int) -> str:
    """A CUresult number as its name and description, e.g. ``CUDA_ERROR_INVALID_VALUE (invalid argument)``."""
    try:
        return _error_string(cu.CUresult(code))
    except ValueError:  # a code this cuda-bindings does not know
        return f"CUresult {code}"


# ------------------------------------------------------------------------------------------- device memory

def synchronize(device: int | None = None) -> None:
    """Wait until all work queued on ``device`` (default as in ``context``) has finished."""
    context(device)
    check(cu.cuCtxSynchronize(), "waiting for the device")


class DeviceBuffer:
    """``nbytes`` of device memory from ``cuMemAlloc`` on ``device`` (default as in ``context``), freed with the
    object, for running kernels without PyTorch. ``array(shape, dtype)`` views it as a kernel argument;
    ``upload`` and ``download`` copy numpy arrays in and out (synchronously)."""

    def __init__(self, nbytes: int, device: int | None = None):
        self.device = default_device() if device is None else device
        context(self.device)
        self.nbytes = nbytes
        self.pointer = int(check(cu.cuMemAlloc(max(nbytes, 1)), f"allocating {nbytes} bytes of device memory"))

    def array(self, shape: Sequence[int], dtype: DType) -> DeviceArray:
        """The buffer as a C-contiguous ``DeviceArray`` of ``shape`` and ``dtype`` (which must fit)."""
        shape = tuple(int(extent) for extent in shape)
        count = 1
        for extent in shape:
            count *= extent
        if count * dtype.nbytes > self.nbytes:
            raise ArgumentError(f"a {dtype.name} array of shape {list(shape)} needs {count * dtype.nbytes} bytes; "
                                f"the buffer holds {self.nbytes}")
        return DeviceArray(self.pointer, shape, _contiguous_strides(shape), dtype.name, self.device)

    def upload(self, host: Any) -> None:
        """Copy the bytes of the C-contiguous numpy array ``host`` to the start of the buffer."""
        if host.nbytes > self.nbytes:
            raise ArgumentError(f"cannot upload {host.nbytes} bytes into a {self.nbytes}-byte buffer")
        context(self.device)
        check(cu.cuMemcpyHtoD(self.pointer, host.ctypes.data, host.nbytes), "copying to the device")

    def download(self, host: Any, offset: int = 0) -> Any:
        """Fill the C-contiguous numpy array ``host`` from the buffer's bytes at ``offset``; returns ``host``.
        Waits for all work on the device first, so results of kernels launched before are complete."""
        if offset + host.nbytes > self.nbytes:
            raise ArgumentError(f"cannot download {host.nbytes} bytes at offset {offset} from a {self.nbytes}-byte "
                                f"buffer")
        synchronize(self.device)
        check(cu.cuMemcpyDtoH(host.ctypes.data, self.pointer + offset, host.nbytes), "copying from the device")
        return host

    def __del__(self):
        pointer, self.pointer = getattr(self, "pointer", 0), 0
        if pointer and _initialised:
            cu.cuMemFree(pointer)  # errors at interpreter exit (driver torn down) are harmless


# ------------------------------------------------------------------------------------------ device arrays

_TORCH_DTYPES = {
    "torch.float16": "float16", "torch.bfloat16": "bfloat16", "torch.float32": "float32",
    "torch.float8_e4m3fn": "float8_e4m3", "torch.float8_e5m2": "float8_e5m2", "torch.int8": "int8",
    "torch.int32": "int32", "torch.int64": "int64", "torch.uint32": "uint32", "torch.bool": "boolean",
}
# numpy typestr without the byte-order character -> warpspec dtype
_TYPESTRS = {"f2": "float16", "f4": "float32", "i1": "int8", "i4": "int32", "i8": "int64", "u4": "uint32",
             "b1": "boolean"}
# DLPack (type code, bits) -> warpspec dtype (dlpack.h DLDataTypeCode)
_DLPACK_DTYPES = {(2, 16): "float16", (4, 16): "bfloat16", (2, 32): "float32", (10, 8): "float8_e4m3",
                  (12, 8): "float8_e5m2", (0, 8): "int8", (0, 32): "int32", (0, 64): "int64", (1, 32): "uint32",
                  (6, 8): "boolean"}
_DLPACK_CUDA = 2
_DLPACK_DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA host (pinned)", 13: "CUDA managed"}
_SUPPORTED = ", ".join(sorted(set(_TORCH_DTYPES.values())))


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    # The first member of DLManagedTensor, so the capsule's pointer is also a DLTensor pointer.
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


# A private prototype rather than setting restype on ctypes.pythonapi, which other libraries share.
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, running = [], 1
    for extent in reversed(shape):
        strides.append(running)
        running *= extent
    return tuple(reversed(strides))


def as_device_array(obj: Any, name: str) -> DeviceArray:
    """View a GPU array as a ``DeviceArray``: a torch CUDA tensor, an object with ``__cuda_array_interface__``
    (CuPy, Numba, ...) or a DLPack producer (``__dlpack__`` + ``__dlpack_device__``).

    Raises ``ArgumentError`` naming the argument ``name`` for a CPU array, an object with no recognised
    interface, or an unsupported dtype. Streams are not synchronised: launch on the stream that produced the data
    (PyTorch's current stream is the default) or synchronise first.
    """
    if isinstance(obj, DeviceArray):
        return obj
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _from_torch(obj, name)
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is not None:
        return _from_cuda_array_interface(interface, name)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _from_dlpack(obj, name)
    raise ArgumentError(f"argument {name!r}: {type(obj).__name__} object is not a GPU array; expected a torch "
                        f"CUDA tensor or an object with __cuda_array_interface__ or __dlpack__")


def _from_torch(tensor: Any, name: str) -> DeviceArray:
    if not tensor.is_cuda:
        raise ArgumentError(f"argument {name!r} is a CPU tensor (device {tensor.device}); move it to the GPU "
                            f"with .cuda()")
    dtype_name = _TORCH_DTYPES.get(str(tensor.dtype))
    if dtype_name is None:
        raise ArgumentError(f"argument {name!r} has dtype {tensor.dtype}, which warpspec does not support; "
                            f"expected one of {_SUPPORTED}")
    return DeviceArray(tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()), dtype_name,
                       tensor.device.index)


def _from_cuda_array_interface(interface: dict, name: str) -> DeviceArray:
    typestr = interface["typestr"]
    dtype_name = _TYPESTRS.get(typestr[1:]) if typestr[:1] in "<|=" else None
    if dtype_name is None:
        hint = (" (bfloat16 and fp8 have no typestr of their own: pass a torch tensor or a DLPack producer)"
                if typestr[1:2] == "V" else "")
        raise ArgumentError(f"argument {name!r} has __cuda_array_interface__ typestr {typestr!r}, which warpspec "
                            f"does not support{hint}; expected one of {_SUPPORTED}")
    itemsize = BY_NAME[dtype_name].nbytes
    shape = tuple(int(extent) for extent in interface["shape"])
    if interface.get("strides") is None:
        strides = _contiguous_strides(shape)
    else:
        byte_strides = tuple(int(stride) for stride in interface["strides"])
        if any(stride % itemsize for stride in byte_strides):
            raise ArgumentError(f"argument {name!r} has byte strides {byte_strides} that are not multiples of its "
                                f"{itemsize}-byte elements")
        strides = tuple(stride // itemsize for stride in byte_strides)
    pointer = int(interface["data"][0])
    device = default_device()
    if pointer:
        _initialise()
        try:
            device = check(cu.cuPointerGetAttribute(
                cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, pointer))
        except CudaError as error:
            raise ArgumentError(f"argument {name!r}: pointer {pointer:#x} from __cuda_array_interface__ is not "
                                f"CUDA memory ({error})") from None
    return DeviceArray(pointer, shape, strides, dtype_name, device)


def _from_dlpack(obj: Any, name: str) -> DeviceArray:
    device_type, device_id = obj.__dlpack_device__()
    if device_type != _DLPACK_CUDA:
        where = _DLPACK_DEVICE_NAMES.get(int(device_type), f"DLPack device type {device_type}")
        raise ArgumentError(f"argument {name!r} is a {where} array ({type(obj).__name__}), not GPU memory; move it "
                            f"to the GPU first (for example torch.as_tensor(x, device='cuda'))")
    capsule = obj.__dlpack__()
    try:
        tensor = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    except ValueError:
        raise ArgumentError(f"argument {name!r}: __dlpack__ did not return an unconsumed 'dltensor' capsule") from None
    # The capsule is left unconsumed: its destructor hands the tensor back to the producer, while ``obj`` (held
    # by the caller) keeps the memory alive.
    dtype_name = _DLPACK_DTYPES.get((tensor.dtype.code, tensor.dtype.bits)) if tensor.dtype.lanes == 1 else None
    if dtype_name is None:
        raise ArgumentError(f"argument {name!r} has DLPack dtype (code {tensor.dtype.code}, {tensor.dtype.bits} bits, "
                            f"{tensor.dtype.lanes} lanes), which warpspec does not support; expected one of "
                            f"{_SUPPORTED}")
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    strides = tuple(tensor.strides[i] for i in range(tensor.ndim)) if tensor.strides else _contiguous_strides(shape)
    return DeviceArray((tensor.data or 0) + tensor.byte_offset, shape, strides, dtype_name, int(device_id))
