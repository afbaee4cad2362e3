"""Launch plans: a kernel launch compiled to straight-line Python once per kernel and argument signature.

A launch has to check its arguments, evaluate the grid and the global views, encode TMA tensor maps and pack the
driver's parameter buffer. Most of that depends only on the kernel and on the *signature* of the arguments: the
kind of every array (a torch tensor, a ``DeviceArray``, another GPU array), its dtype, its device and, for arrays
the kernel views, its rank. A ``LaunchPlan`` works all of that out once and generates a Python function that does
the rest for one call:

* every check the launch path makes is still made, as a cheap test in generated code; when a test fails, the
  generic check (``warpspec.arguments``, ``as_device_array``, ``check_tiled_tensor_map``) runs and raises its usual
  message, so a bad argument reads the same whichever path found it;
* a call whose signature differs from the plan's (another dtype, device, rank or array kind; for a Script's plan
  entry also another compile-time value) returns ``MISS``: the caller then finds or builds the plan for it, and
  building one runs the generic checks first, so nothing is ever launched through a plan made for other arguments;
* tensor maps are cached per plan by (pointer, view shape, view strides), box and swizzle being the plan's; the
  parameter buffer and the ``CUlaunchConfig`` are prepared once, and a call rewrites its scalar and pointer slots
  with one ``struct.pack_into``, a tensor map's 128 bytes only when that map changed;
* the launch itself is one ctypes call of ``cuLaunchKernelEx`` on the current stream (PyTorch's when PyTorch uses
  CUDA, so ``torch.cuda.graph`` captures it), with no host synchronisation and no allocation;
* a launch goes to the GPU of its arrays, whatever the current device: in that GPU's context (made current for
  the launch, the context found current put back after), with its module and its current stream. Arrays on two
  GPUs are an ``ArgumentError`` naming both.

What talks to the GPU goes through a ``DeviceSide``; tests pass a fake one, so plans run and are checked without a
GPU.
"""

from __future__ import annotations

import ctypes
import math
import re
import struct
import sys
import threading
from dataclasses import dataclass

from warpspec.arguments import check_array_shape, check_tma_view, check_view, launch_grid, scalar_value
from warpspec.dtypes import DType, PointerType
from warpspec.errors import ArgumentError, CompileError
from warpspec.isa.memory import GlobalView
from warpspec.ir import nodes as ir
from warpspec.ir.evaluate import OPERATORS, wrap
from warpspec.ir.visit import ExprVisitor


class _Miss:
    def __repr__(self) -> str:
        return "MISS"


#: What a plan's function returns when the call's signature is not the plan's (nothing was launched).
MISS = _Miss()

_FLOAT32_MAX = 3.4028234663852886e38
_MAPS_PER_USE = 64  # tensor maps kept per (plan, map); a new pointer or shape past that starts the cache afresh
_INT_RANGES = {"int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1)}
# One 8-byte parameter slot per scalar or pointer, little-endian with explicit padding (struct's "<" packs
# without alignment, so the layout is exactly this).
_SLOT_FORMATS = {"pointer": "Q", "int32": "i4x", "uint32": "I4x", "int64": "q", "float32": "f4x", "boolean": "?7x"}
# CUlaunchConfig up to and including hStream: grid, block, dynamic shared bytes, padding, stream.
_CONFIG_HEAD = struct.Struct("<7I4xQ")


# ------------------------------------------------------------------------------------------ argument checks

def host_values(kernel: ir.Kernel, arguments: dict) -> tuple[dict, dict]:
    """Check the runtime ``arguments`` (by parameter name) of a launch: the environment of scalar values for host
    expressions (parameter Var uid -> value; a pointer's is its address) and the ``DeviceArray`` of every pointer
    parameter, all on one GPU (``launch_device``). Raises ``ArgumentError`` naming the first bad argument, and
    both arguments of a pair on different GPUs."""
    from warpspec.cuda.driver import as_device_array

    env, arrays = {}, {}
    first = None  # the first array argument's name, which fixes the GPU of the launch
    for param in kernel.params:
        value = arguments[param.name]
        if isinstance(param.type, PointerType):
            array = as_device_array(value, param.name)
            if array.dtype_name != param.type.dtype.name:
                raise ArgumentError(f"argument {param.name!r}: expected {param.type.dtype.name} elements for a "
                                    f"{param.type!r} parameter, got {array.dtype_name}")
            if first is None:
                first = param.name
            elif array.device_index != arrays[first].device_index:
                raise ArgumentError(f"argument {param.name!r} is on GPU {array.device_index} but argument "
                                    f"{first!r} is on GPU {arrays[first].device_index}: every array of one launch "
                                    f"must be on the same GPU")
            arrays[param.name] = array
            env[param.var.uid] = array.pointer
        else:
            env[param.var.uid] = scalar_value(param, value)
    return env, arrays


def launch_device(arrays: dict, current) -> int:
    """The GPU a launch goes to: that of its arrays (``host_values`` checked they share one), whatever the current
    device; ``current()`` (the current device) for a kernel without array arguments."""
    for array in arrays.values():
        return array.device_index
    return current()


def first_array_device(kernel: ir.Kernel, arguments: dict) -> int | None:
    """The GPU a launch of ``kernel`` with ``arguments`` goes to, read off its first array argument without the
    launch's checks (which run at the launch): None when the kernel has no array parameter or that argument is
    no GPU array. For work done beside a launch, on its GPU (debug mode's record, a profile's buffer)."""
    from warpspec.cuda.driver import array_device

    for param in kernel.params:
        if isinstance(param.type, PointerType):
            try:
                return array_device(arguments[param.name], param.name)
            except ArgumentError:
                return None
    return None


def _float32_slot(param: ir.Param, value) -> float:
    """A float32 parameter's value as the kernel receives it: checked, then rounded as ctypes.c_float does
    (out-of-range magnitudes become infinities rather than errors)."""
    return ctypes.c_float(scalar_value(param, value)).value


def _divide(symbol: str, a, b):
    """``a symbol b`` for //, % and cdiv, refusing a zero divisor as the expression evaluator does."""
    if b == 0:
        raise ZeroDivisionError(f"integer division by zero in {symbol!r}")
    return OPERATORS[symbol](a, b)


# ------------------------------------------------------------------------------------------- the device side

class DeviceSide:
    """What a plan needs from the GPU: the current device and stream, the kernel's function handle, tensor maps,
    the primary context and the two ctypes entry points of every launch. A fake with the same members lets
    plans run without a GPU."""

    def device_getter(self, torch_arrays: bool):
        """A function returning the device launches go to now (PyTorch's current device when PyTorch uses
        CUDA, else 0). ``torch_arrays``: the plan's arrays are torch CUDA tensors, so PyTorch has initialised
        CUDA and its own getter can be called directly."""
        from warpspec.cuda.driver import default_device

        torch = sys.modules.get("torch")
        if torch_arrays and hasattr(torch._C, "_cuda_getDevice"):
            return torch._C._cuda_getDevice
        return default_device

    def stream_getter(self, torch_arrays: bool):
        """A function of the device returning the stream launches go to by default (see ``device_getter``)."""
        from warpspec.cuda.driver import default_stream

        torch = sys.modules.get("torch")
        if torch_arrays and hasattr(torch._C, "_cuda_getCurrentRawStream"):
            return torch._C._cuda_getCurrentRawStream
        return default_stream

    def function(self, built, device: int) -> int:
        """The CUfunction handle of ``built`` on ``device``, loaded once and allowed its dynamic shared memory."""
        from warpspec.cuda.driver import load_module

        function = load_module(built.module.cubin, device).function(built.generated.name)
        if built.generated.shared_bytes > function._max_dynamic_shared:
            function.set_max_dynamic_shared(built.generated.shared_bytes)
        return int(function.handle)

    def context(self, device: int) -> int:
        """Make ``device``'s primary context current in this thread; return its handle."""
        from warpspec.cuda.driver import context

        return int(context(device))

    def restore_context(self, handle: int) -> None:
        """Make the context ``handle`` (a launch found it current) current again in this thread."""
        from warpspec.cuda.driver import set_current_context

        set_current_context(handle)

    def tensor_map(self, dtype: DType, address: int, shape: tuple, strides_bytes: tuple, box: tuple,
                   swizzle_bytes: int, l2_promotion: int) -> bytes:
        """The 128 bytes of a checked tiled tensor map (``encode_tiled_tensor_map``'s arguments)."""
        from warpspec.cuda.driver import encode_tiled_tensor_map

        return encode_tiled_tensor_map(dtype, address, shape, strides_bytes, box, swizzle_bytes,
                                       l2_promotion).to_bytes()

    def entry_points(self):
        """An object with ctypes functions ``launch_kernel_ex(config, function, params, extra)`` and
        ``ctx_get_current(pointer to a CUcontext)``, both returning a CUresult."""
        from warpspec.cuda.driver import entry_points

        return entry_points()

    def launch_failed(self, code: int, what: str) -> Exception:
        """The error for a launch the driver refused with CUresult ``code``."""
        from warpspec.cuda.driver import CudaError, error_name

        return CudaError(f"{what}: {error_name(code)}", code)


# ---------------------------------------------------------------------------------------- host expressions

class _Unsupported(Exception):
    """An expression the host cannot evaluate from the parameters alone."""


class _Source(ExprVisitor):
    """Python source of IR expressions over the kernel parameters, with the evaluator's semantics (integers wrap
    to their type, // and % truncate, a zero divisor raises). Constants that are not plain integers are bound in
    ``namespace``."""

    def __init__(self, names: dict[int, str], namespace: dict, block_index: bool):
        self.names, self.namespace = names, namespace
        self.block_index = block_index  # blockIdx.* read as 0 (views, as the first block sees them)

    def __call__(self, e: ir.Expr) -> str:
        return self.visit(e)

    def const(self, e):
        return self.constant(wrap(e.value, e.type))

    def var(self, e):
        if e.uid not in self.names:
            raise _Unsupported(e.name)
        return self.names[e.uid]

    def special(self, e):
        if self.block_index and e.name.startswith("blockIdx."):
            return "0"
        raise _Unsupported(e.name)

    def binary(self, e):
        a, b = self(e.a), self(e.b)
        if e.op == "cdiv" and isinstance(e.b, ir.Const) and wrap(e.b.value, e.b.type) != 0:
            return self.wrapped(f"(-(-{a} // {b}))", e.type)  # the evaluator's cdiv, without a zero test
        if e.op in ("//", "%", "cdiv"):
            return self.wrapped(f"_divide({e.op!r}, {a}, {b})", e.type)
        if e.op in ("+", "-", "*", "/", "&", "|", "^", "<<", ">>"):
            return self.wrapped(f"({a} {e.op} {b})", e.type, truncate=e.op == "/")
        if e.op in ir.COMPARISONS:
            return f"({a} {e.op} {b})"
        # min, max, and, or: the evaluator's functions (they evaluate both operands, as it does)
        name = "_op_" + e.op
        self.namespace[name] = OPERATORS[e.op]
        return self.wrapped(f"{name}({a}, {b})", e.type)

    def unary(self, e):
        a = self(e.a)
        if e.op == "not":
            return f"(not {a})"
        return self.wrapped(f"({e.op}{a})", e.dtype)

    def select(self, e):
        return f"({self(e.a)} if {self(e.cond)} else {self(e.b)})"

    def convert(self, e):
        a = self(e.a)
        if e.type.kind in ("int", "uint"):
            return self.wrapped(f"_trunc({a})", e.type)
        return self.wrapped(a, e.type)

    def other(self, e):
        raise _Unsupported(type(e).__name__)

    def constant(self, value) -> str:
        if type(value) is int:
            return repr(value)
        name = f"_const{len(self.namespace)}"
        self.namespace[name] = value
        return name

    @staticmethod
    def wrapped(text: str, dtype: DType, truncate: bool = False) -> str:
        """``text`` converted as ``ir.evaluate.wrap`` converts to ``dtype``, inline."""
        if dtype.kind == "float":
            return f"float({text})"
        if dtype.kind == "bool":
            return f"bool({text})"
        if truncate:
            text = f"int({text})"
        mask = (1 << dtype.nbits) - 1
        if dtype.kind == "uint":
            return f"({text} & {mask})"
        half = 1 << (dtype.nbits - 1)
        return f"((({text} + {half}) & {mask}) - {half})"


# ------------------------------------------------------------------------------------------------- the plan

@dataclass(frozen=True)
class _Array:
    """The signature of one array argument."""

    kind: str  # "torch": a torch tensor of class ``cls``; "device_array": a DeviceArray; "generic": anything else
    cls: type
    dtype: object  # the torch dtype for "torch", else the warpspec dtype name
    rank: int | None  # None: the kernel views no part of it, so its shape is never read


def _array_signature(value, array) -> _Array:
    from warpspec.cuda.driver import DeviceArray

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return _Array("torch", type(value), value.dtype, len(array.shape))
    if type(value) is DeviceArray:
        return _Array("device_array", DeviceArray, array.dtype_name, len(array.shape))
    return _Array("generic", type(value), array.dtype_name, len(array.shape))


class LaunchPlan:
    """How to launch ``built`` (the ``BuiltKernel`` of ``kernel``) on one device for arguments of one signature.

    ``run(arguments, stream=None)`` takes the runtime arguments by parameter name, as ``launch_kernel`` does;
    ``entry(...)`` makes the variant a Script's call uses, taking the call's positional arguments. Both launch and
    return None, or return ``MISS`` without launching when the arguments are not of this plan's signature.

    Building a plan checks ``arguments`` with the generic checks (``host_values``) and raises their errors; only
    a plan built without error is kept by its callers.
    """

    def __init__(self, kernel: ir.Kernel, built, arguments: dict, l2_promotion: int = 128,
                 device_side: DeviceSide | None = None):
        self.kernel, self.built, self.l2_promotion = kernel, built, l2_promotion
        self.device_side = device_side = device_side or default_device_side()
        has_torch = _torch_arrays(kernel, arguments)
        self.current_device = device_side.device_getter(has_torch)
        self.current_stream = device_side.stream_getter(has_torch)
        self.entries = 0  # entry functions made, so each binds its constants under names of its own
        env, arrays = host_values(kernel, arguments)
        self.device = launch_device(arrays, self.current_device)
        #: Whether the plan's device is its arrays' (each launch checks theirs) or, without arrays, the current one.
        self.follows_arrays = bool(arrays)
        self.views = [stmt for stmt in ir.walk(kernel.body) if isinstance(stmt, GlobalView)]
        names = {p.var.uid: p.name for p in kernel.params}
        viewed = {names[stmt.pointer.uid] for stmt in self.views}
        self.arrays = {}
        for param in kernel.params:
            if isinstance(param.type, PointerType):
                signature = _array_signature(arguments[param.name], arrays[param.name])
                if param.name not in viewed:
                    signature = _Array(signature.kind, signature.cls, signature.dtype, None)
                self.arrays[param.name] = signature
        self.lock = threading.Lock()
        self.maps: list[dict] = [{} for _ in built.generated.tensor_maps]  # per map: key -> its 128 bytes
        self._prepare_buffers()
        previous = self._current_context()
        self.function = device_side.function(built, self.device)
        self.context = device_side.context(self.device)
        if previous and previous != self.context:
            device_side.restore_context(previous)
        self.namespace = self._namespace()
        self.body = self._body()
        self.binder = None  # the checks of ``run`` returning their values, for ``bind`` (made at its first call)
        self.run = self._compile(self._run_source(), "run")

    def _current_context(self) -> int:
        """The handle of the context current in this thread (0: none)."""
        handle = ctypes.c_void_p()
        self.device_side.entry_points().ctx_get_current(ctypes.addressof(handle))
        return handle.value or 0

    # --------------------------------------------------------------------------------------- buffers

    def _prepare_buffers(self) -> None:
        """The kernelParams array and the buffer it points into (scalar and pointer slots, then the tensor
        maps 64-byte aligned), and the launch config with its cluster attribute."""
        generated = self.built.generated
        slots = ["pointer" if isinstance(p.type, PointerType) else p.type.name for p in self.kernel.params]
        if generated.block_group:
            slots += ["int32", "int32"]  # grid_x, grid_y, after the tensor maps in the parameter list
        self.slot_format = struct.Struct("<" + "".join(_SLOT_FORMATS[slot] for slot in slots))
        maps_start = -(-self.slot_format.size // 64) * 64
        self.map_offsets = [maps_start + 128 * use.index for use in generated.tensor_maps]
        size = maps_start + 128 * len(generated.tensor_maps)
        self.buffer = (ctypes.c_uint8 * (size + 64))()
        # Aligned view of the buffer: cuda.h asks for 64-byte aligned CUtensorMaps.
        shift = -ctypes.addressof(self.buffer) % 64
        self.view = memoryview(self.buffer).cast("B")[shift:shift + size]
        base = ctypes.addressof(self.buffer) + shift
        addresses = [base + 8 * i for i in range(len(self.kernel.params))]
        addresses += [base + offset for offset in self.map_offsets]
        if generated.block_group:
            addresses += [base + 8 * len(self.kernel.params), base + 8 * (len(self.kernel.params) + 1)]
        self.params = (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
        from warpspec.cuda.driver import CLUSTER_DIMENSION, LaunchAttribute, LaunchConfig

        self.config = LaunchConfig()
        self.attribute = LaunchAttribute()
        if self.kernel.cluster != (1, 1, 1):
            self.attribute.id = CLUSTER_DIMENSION
            x, y, z = self.kernel.cluster
            self.attribute.value[0] = x | y << 32
            self.attribute.value[1] = z
            self.config.attrs = ctypes.addressof(self.attribute)
            self.config.numAttrs = 1
        self.last_maps: list = [None] * len(generated.tensor_maps)

    # ---------------------------------------------------------------------------------- tensor maps

    def encode_map(self, index: int, key: tuple) -> bytes:
        """Encode tensor map ``index`` for ``key`` = (pointer, *view shape, *view strides), with the generic
        checks and their messages; remember it."""
        use = self.built.generated.tensor_maps[index]
        rank = (len(key) - 1) // 2
        pointer, shape, strides = key[0], key[1:1 + rank], key[1 + rank:]
        check_tma_view(use.pointer, use.view.name, use.view.dtype, pointer, shape, strides)  # the emulator's too
        elem = use.view.dtype.nbytes
        try:
            data = self.device_side.tensor_map(
                use.view.dtype, pointer, tuple(reversed(shape)), tuple(s * elem for s in reversed(strides[:-1])),
                (use.tile.box_cols, use.tile.box_rows) + (1,) * (rank - 2), use.tile.swizzle_bytes,
                self.l2_promotion)
        except ArgumentError as error:
            raise ArgumentError(f"argument {use.pointer!r} (view {use.view.name}): {error}") from None
        cache = self.maps[index]
        if len(cache) >= _MAPS_PER_USE:
            cache.clear()
        cache[key] = data
        return data

    # ------------------------------------------------------------------------------- generated code

    def _namespace(self) -> dict:
        from warpspec.cuda.driver import DeviceArray, as_device_array

        entry = self.device_side.entry_points()
        context_out = ctypes.c_void_p()
        namespace = {
            "MISS": MISS, "_scalar": scalar_value, "_float32": _float32_slot, "_check_view": check_view,
            "_check_shape": check_array_shape, "_launch_grid": launch_grid, "_as_device_array": as_device_array,
            "_DeviceArray": DeviceArray,
            "_divide": _divide, "_trunc": math.trunc, "_K": self.kernel, "_plan": self,
            "_get_device": self.current_device, "_get_stream": self.current_stream,
            "_maps": self.maps, "_last": self.last_maps, "_mv": self.view,
            "_pack": self.slot_format.pack_into, "_cfg": memoryview(self.config).cast("B"),
            "_cfg_pack": _CONFIG_HEAD.pack_into, "_CFG": ctypes.addressof(self.config),
            "_PARAMS": ctypes.addressof(self.params), "_FN": self.function, "_CTX": self.context,
            "_launch": entry.launch_kernel_ex, "_ctx_get": entry.ctx_get_current,
            "_ctx_out": context_out, "_ctx_ref": ctypes.addressof(context_out),
            "_make_current": self.device_side.context, "_restore": self.device_side.restore_context,
            "_lock": self.lock, "_failed": self._failed,
        }
        for i, param in enumerate(self.kernel.params):
            namespace[f"_P{i}"] = param
            signature = self.arrays.get(param.name)
            if signature is not None:
                namespace[f"_T{i}"], namespace[f"_D{i}"] = signature.cls, signature.dtype
        for i, stmt in enumerate(self.views):
            namespace[f"_V{i}"] = stmt
        return namespace

    def _body(self) -> list[str]:
        """The lines of a launch after the device check, with the runtime parameters in locals ``v0, v1, ...``
        and the stream in ``stream`` (None: the default)."""
        kernel, generated = self.kernel, self.built.generated
        lines: list[str] = []
        emit = lines.append
        local = {}  # parameter Var uid -> the local holding its host value (a pointer's: its address)
        spans = {}  # pointer parameter name -> the local holding the elements its array spans
        slot_values = []
        for i, param in enumerate(kernel.params):
            v = f"v{i}"
            if isinstance(param.type, PointerType):
                self._emit_array(emit, i, param, v)
                local[param.var.uid] = f"p{i}"
                slot_values.append(f"p{i}")
                if self.arrays[param.name].rank is not None:
                    spans[param.name] = f"n{i}"
                continue
            name = param.type.name
            if name in _INT_RANGES:
                low, high = _INT_RANGES[name]
                emit(f"if {v}.__class__ is not int or not {low} <= {v} <= {high}: {v} = _scalar(_P{i}, {v})")
                slot_values.append(v)
            elif name == "float32":
                emit(f"if {v}.__class__ is not float: {v} = _scalar(_P{i}, {v})")
                emit(f"f{i} = {v} if -{_FLOAT32_MAX!r} <= {v} <= {_FLOAT32_MAX!r} else _float32(_P{i}, {v})")
                slot_values.append(f"f{i}")
            else:  # boolean
                emit(f"if {v}.__class__ is not bool: {v} = _scalar(_P{i}, {v})")
                slot_values.append(v)
            local[param.var.uid] = v
        env = "{" + ", ".join(f"{uid}: {name}" for uid, name in local.items()) + "}"
        names = {p.var.uid: p.name for p in kernel.params}
        view_source = _Source(local, self.namespace, block_index=True)
        geometry = {}  # view decl uid -> (shape locals, stride locals)
        indices = {p.name: i for i, p in enumerate(kernel.params)}
        shaped = set()  # pointer parameters whose first view has been seen
        for j, stmt in enumerate(self.views):
            try:
                shape = [view_source(e) for e in stmt.decl.shape]
                strides = [view_source(e) for e in stmt.strides]
            except _Unsupported:
                raise CompileError(f"the shape of global view {stmt.decl.name} must depend only on kernel "
                                   f"parameters for the CUDA back end", str(stmt.loc)) from None
            shape_locals = [f"g{j}_{d}" for d in range(len(shape))]
            stride_locals = [f"h{j}_{d}" for d in range(len(strides))]
            for target, text in zip(shape_locals + stride_locals, shape + strides):
                emit(f"{target} = {text}")
            pointer = names[stmt.pointer.uid]
            needed = " + ".join(f"({g} - 1) * {h}" for g, h in zip(shape_locals, stride_locals)) + " + 1"
            nonzero = " and ".join(shape_locals)
            negative = " or ".join(f"{g} < 0" for g in shape_locals)
            emit(f"if {negative} or ({needed} if {nonzero} else 0) > {spans[pointer]}:")
            emit(f"    _check_view({pointer!r}, _V{j}, ({', '.join(shape_locals)},), ({', '.join(stride_locals)},), "
                 f"{spans[pointer]})")
            geometry[stmt.decl.uid] = (shape_locals, stride_locals)
            signature = self.arrays[pointer]
            if pointer not in shaped and signature.kind == "torch" and signature.rank == len(shape) >= 2:
                # A torch tensor's shape is known: the first view of it must have that shape (check_array_shape).
                i = indices[pointer]
                emit(f"if s{i} != ({', '.join(shape_locals)},):")
                emit(f"    _check_shape({pointer!r}, _V{j}, ({', '.join(shape_locals)},), s{i}, "
                     f"({', '.join(stride_locals)},))")
            shaped.add(pointer)
        grid_source = _Source(local, self.namespace, block_index=False)
        try:
            grid = [grid_source(e) for e in kernel.grid] + ["1"] * (3 - len(kernel.grid))
        except _Unsupported:
            grid = None
        if grid is None:  # the generic evaluation, which raises what it raises for such a grid
            emit(f"x, y, z = _launch_grid(_K, {env})")
        else:
            for axis, text in zip("xyz", grid):
                emit(f"{axis} = {text}")
            valid = " and ".join(f"0 < {axis} < 2147483648" for axis in "xyz")
            clusters = [f"{axis} % {c}" for axis, c in zip("xyz", kernel.cluster) if c != 1]
            emit(f"if not ({valid}){''.join(' or ' + c for c in clusters)}:")
            emit(f"    _launch_grid(_K, {env})")
        if generated.block_group:
            slot_values += ["x", "y"]
            launch_grid_text = "x * y, 1, 1"
        else:
            launch_grid_text = "x, y, z"
        self.launch_start = len(lines)  # what follows needs only the values computed above (``bind``)
        emit("if stream is None: stream = _get_stream(dev)")
        emit("with _lock:")
        for use in generated.tensor_maps:
            shape_locals, stride_locals = geometry[use.view.uid]
            pointer = next(i for i, p in enumerate(kernel.params) if p.name == use.pointer)
            i = use.index
            emit(f"    k{i} = (p{pointer}, {', '.join(shape_locals + stride_locals)})")
            emit(f"    if k{i} != _last[{i}]:")
            emit(f"        m = _maps[{i}].get(k{i})")
            emit(f"        if m is None: m = _plan.encode_map({i}, k{i})")
            offset = self.map_offsets[i]
            emit(f"        _mv[{offset}:{offset + 128}] = m")
            emit(f"        _last[{i}] = k{i}")
        emit(f"    _pack(_mv, 0, {', '.join(slot_values)})")
        emit(f"    _cfg_pack(_cfg, 0, {launch_grid_text}, {kernel.num_threads}, 1, 1, {generated.shared_bytes}, "
             f"stream)")
        emit("    _ctx_get(_ctx_ref)")
        emit("    if _ctx_out.value != _CTX:")
        # PyTorch's runtime calls read the current context as the current device: a launch on another GPU than
        # the current one (its arrays') puts back the context it found, so the current device stays what it was.
        emit("        found = _ctx_out.value")
        emit(f"        _make_current({self.device})")
        emit("        code = _launch(_CFG, _FN, _PARAMS, None)")
        emit("        if found: _restore(found)")
        emit("    else:")
        emit("        code = _launch(_CFG, _FN, _PARAMS, None)")
        emit(f"if code: _failed(code, ({launch_grid_text}))")
        return lines

    def _emit_array(self, emit, i: int, param: ir.Param, v: str) -> None:
        """Lines that return MISS unless array argument ``v`` has this plan's signature, then read its address
        into ``p{i}`` and (for a viewed array) the elements it spans into ``n{i}``."""
        signature = self.arrays[param.name]
        device = self.device
        if signature.kind == "torch":
            emit(f"if {v}.__class__ is not _T{i} or {v}.dtype is not _D{i} or {v}.get_device() != {device}: "
                 f"return MISS")
            shape, strides, pointer = f"{v}.shape", f"{v}.stride()", f"{v}.data_ptr()"
        else:
            if signature.kind == "device_array":
                emit(f"if {v}.__class__ is not _DeviceArray: return MISS")
                array = v
            else:
                emit(f"if {v}.__class__ is not _T{i}: return MISS")
                emit(f"w{i} = _as_device_array({v}, {param.name!r})")
                array = f"w{i}"
            emit(f"if {array}.dtype_name != _D{i} or {array}.device_index != {device}: return MISS")
            shape, strides, pointer = f"{array}.shape", f"{array}.strides_elements", f"{array}.pointer"
        if signature.rank is not None:
            emit(f"s{i} = {shape}")
            emit(f"if len(s{i}) != {signature.rank}: return MISS")
            if signature.rank == 0:
                emit(f"n{i} = 1")
            else:
                extents = [f"x{i}_{d}" for d in range(signature.rank)]
                steps = [f"y{i}_{d}" for d in range(signature.rank)]
                emit(f"{', '.join(extents)}, = s{i}")
                emit(f"{', '.join(steps)}, = {strides}")
                needed = " + ".join(f"({e} - 1) * {s}" for e, s in zip(extents, steps))
                emit(f"n{i} = {needed} + 1 if {' and '.join(extents)} else 0")
        emit(f"p{i} = {pointer}")

    def _run_source(self, body: list[str] | None = None) -> str:
        """``run``'s source: the arguments read by name, then ``body`` (default: the whole launch)."""
        head = ["def run(A, stream=None):", *self._device_lines()]
        head += [f"    v{i} = A[{p.name!r}]" for i, p in enumerate(self.kernel.params)]
        return "\n".join(head + ["    " + line for line in (self.body if body is None else body)])

    def entry(self, parameters: tuple, count: int, compile_time: dict, defaults: dict):
        """The function a Script call runs: ``call(args)`` for a call with ``count`` positional arguments and
        no keywords, ``parameters`` being the Script's parameter names in order, the first ``count`` from
        ``args`` and the rest ``defaults`` (by name). Returns MISS unless ``args`` has ``count`` entries, the
        compile-time arguments are ``compile_time`` (same values and Python types) and the arrays match."""
        self.entries += 1
        prefix = f"_entry{self.entries}_"
        head = ["def call(args):", f"    if len(args) != {count}: return MISS"]
        if count:
            head.append(f"    {', '.join(f'a{j}' for j in range(count))}, = args")
        for j, name in enumerate(parameters[:count]):
            if name in compile_time:
                value = compile_time[name]
                self.namespace[f"{prefix}{j}"] = value
                head.append(f"    if a{j}.__class__ is not {type(value).__name__} or a{j} != {prefix}{j}: "
                            f"return MISS")
        head += [*self._device_lines(), "    stream = None"]
        position = {name: j for j, name in enumerate(parameters)}
        for i, param in enumerate(self.kernel.params):
            j = position[param.name]
            if j < count:
                head.append(f"    v{i} = a{j}")
            else:
                self.namespace[f"{prefix}default{i}"] = defaults[param.name]
                head.append(f"    v{i} = {prefix}default{i}")
        return self._compile("\n".join(head + ["    " + line for line in self.body]), "call")

    def bind(self, arguments: dict, pointers: tuple[str, ...]):
        """A launch of this plan for calls whose arguments are ``arguments`` (by parameter name) but for the
        addresses of their arrays: ``launch(*addresses, stream=None)`` takes the address of each array parameter
        named in ``pointers`` (all of them, in that order) as an integer. Binding makes ``run``'s checks on
        ``arguments`` and raises their errors; returns MISS when they are not of this plan's signature.

        Each launch does only what depends on the addresses: the tensor maps (looked up, or encoded with their
        checks), the parameter buffer and the driver's launch. So the caller must see to the rest, as
        ``warpspec.ops`` does by keying its calls on the arrays' description: every later call's arrays have the
        kind, dtype, device, shape and strides of ``arguments``' (an array the kernel only views within its
        extent, such as a workspace, may be larger), and the addresses are of memory the kernel may use."""
        names = [p.name for p in self.kernel.params if isinstance(p.type, PointerType)]
        if sorted(pointers) != sorted(names):
            raise ValueError(f"bind: pointers must name each array parameter once ({', '.join(names)}), got "
                             f"{pointers}")
        if self.binder is None:
            self.binder = self._compile(self._run_source(self.body[:self.launch_start] + ["return locals()"]), "run")
        values = self.binder(arguments)
        if values is MISS:
            return MISS
        launch_lines = self.body[self.launch_start:]
        index = {p.name: i for i, p in enumerate(self.kernel.params)}
        addresses = [f"p{index[name]}" for name in pointers]
        # The launch reads the checks' locals by name: each one it reads becomes a constant, the addresses
        # parameters.
        read = set(re.findall(r"\b\w+\b", "\n".join(launch_lines)))
        used = sorted(name for name in values if name in read and name not in addresses and name != "stream")
        self.entries += 1
        prefix = f"_bound{self.entries}_"
        head = [f"def launch({', '.join(addresses)}, stream=None):"]
        for name in used:
            value = values[name]
            if type(value) in (int, bool):
                head.append(f"    {name} = {value!r}")
            else:  # a float32 slot's value: bound by name, as repr() of inf or nan is no literal
                self.namespace[prefix + name] = value
                head.append(f"    {name} = {prefix}{name}")
        return self._compile("\n".join(head + ["    " + line for line in launch_lines]), "launch")

    def _device_lines(self) -> list[str]:
        """The lines setting ``dev``, the plan's device: each array's device is checked where it is read; a plan
        without arrays serves the current device alone."""
        if self.follows_arrays:
            return [f"    dev = {self.device}"]
        return ["    dev = _get_device()", f"    if dev != {self.device}: return MISS"]

    def _compile(self, source: str, name: str):
        code = compile(source, f"<launch plan of {self.kernel.name}>", "exec")
        exec(code, self.namespace)
        function = self.namespace.pop(name)
        function.source = source  # what the plan runs, for reading and for tests
        return function

    def _failed(self, code: int, grid: tuple) -> None:
        cluster = self.kernel.cluster if self.kernel.cluster != (1, 1, 1) else None
        generated = self.built.generated
        raise self.device_side.launch_failed(
            code, f"launching {generated.name!r} (grid {grid}, block ({self.kernel.num_threads}, 1, 1), cluster "
                  f"{cluster}, {generated.shared_bytes} B shared)")


def _torch_arrays(kernel: ir.Kernel, arguments: dict) -> bool:
    """Whether every array argument is a torch CUDA tensor: then PyTorch has initialised CUDA, and its own device
    and stream getters apply."""
    torch = sys.modules.get("torch")
    pointers = [arguments[p.name] for p in kernel.params if isinstance(p.type, PointerType)]
    return torch is not None and bool(pointers) and all(
        isinstance(value, torch.Tensor) and value.is_cuda for value in pointers)


_default_side: DeviceSide | None = None


def default_device_side() -> DeviceSide:
    """The process's DeviceSide (the real GPU)."""
    global _default_side
    if _default_side is None:
        _default_side = DeviceSide()
    return _default_side
