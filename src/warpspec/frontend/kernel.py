"""From a Script instance and its call arguments to an ``ir.Kernel`` (one per compile-time specialisation)."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

from warpspec.dtypes import DType, PointerType, boolean, float32, int32, int64, uint32
from warpspec.errors import ArgumentError, CompileError
from warpspec.frontend.bindings import Binding, InlineFunction
from warpspec.frontend.interpreter import Interpreter, _parse_function
from warpspec.frontend.language import Language
from warpspec.ir import nodes as ir
from warpspec.passes import analyse

#: Annotations that make a parameter compile-time: its value specialises the kernel.
COMPILE_TIME_TYPES = (int, float, bool)
#: Scalar types a runtime parameter may have (what both back ends pass by value).
RUNTIME_SCALAR_TYPES = (int32, uint32, int64, float32, boolean)


@dataclass(frozen=True)
class Parameter:
    """A parameter of a kernel's ``__call__``: runtime (``DType`` or ``PointerType``) or compile-time (a Python
    type)."""

    name: str
    annotation: object
    default: object = ast  # `ast` as a sentinel: no default

    @property
    def runtime(self) -> bool:
        return isinstance(self.annotation, (DType, PointerType, InstancePointer))

    @property
    def pointer(self) -> bool:
        return isinstance(self.annotation, (PointerType, InstancePointer))


@dataclass(frozen=True)
class InstancePointer:
    """A pointer parameter whose element type is a compile-time attribute of the Script instance, written
    ``~self.in_dtype``: one class serves every element type its constructor takes, and each instance's kernel
    gets the pointer type of its own attribute (``script_parameters``)."""

    attribute: str

    def __repr__(self) -> str:
        return f"~self.{self.attribute}"


def kernel_function(script_cls):
    """The kernel body (``__call__`` as written) of a Script class."""
    body = getattr(script_cls, "__kernel__", None)
    if body is None:
        raise CompileError(f"{script_cls.__name__} defines no __call__ kernel body")
    return body


@functools.lru_cache(maxsize=None)
def parameters(script_cls) -> tuple[Parameter, ...]:
    """The kernel's parameters with their annotations evaluated in the kernel module (once per class: every
    launch binds its arguments against them)."""
    function = kernel_function(script_cls)
    node, path = _parse_function(function)
    builder = Interpreter()
    builder.globals, builder.file = function.__globals__, path
    result = []
    args = node.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        raise CompileError("kernel parameters must be plain positional parameters", f"{path}:{node.lineno}")
    defaults = [ast] * (len(args.args) - len(args.defaults)) + list(args.defaults)
    for arg, default in list(zip(args.args, defaults))[1:]:
        builder.loc = ir.Loc(path, arg.lineno)
        if arg.annotation is None:
            raise builder.error(f"kernel parameter {arg.arg!r} needs an annotation: a runtime type (int32, ~float16, "
                                f"...) or a compile-time one (int, float, bool)")
        annotation = _instance_pointer(arg.annotation, node.args.args[0].arg)
        if annotation is None:
            annotation = builder.eval(arg.annotation)
        if not isinstance(annotation, (DType, PointerType, InstancePointer)) and annotation not in COMPILE_TIME_TYPES:
            raise builder.error(f"parameter {arg.arg!r}: annotation {annotation!r} is neither a runtime type "
                                f"(int32, uint32, float32, ~dtype, ~self.dtype_attribute) nor int, float or bool")
        if isinstance(annotation, DType) and annotation not in RUNTIME_SCALAR_TYPES:
            raise builder.error(f"parameter {arg.arg!r}: runtime scalars are "
                                f"{', '.join(t.name for t in RUNTIME_SCALAR_TYPES)}; got {annotation.name}")
        default_value = ast if default is ast else builder.eval(default)
        result.append(Parameter(arg.arg, annotation, default_value))
    return tuple(result)


def _instance_pointer(annotation: ast.expr, self_name: str) -> InstancePointer | None:
    """``~self.NAME`` as an ``InstancePointer``; None for any other annotation."""
    if (isinstance(annotation, ast.UnaryOp) and isinstance(annotation.op, ast.Invert)
            and isinstance(annotation.operand, ast.Attribute) and isinstance(annotation.operand.value, ast.Name)
            and annotation.operand.value.id == self_name):
        return InstancePointer(annotation.operand.attr)
    return None


def script_parameters(script) -> tuple[Parameter, ...]:
    """The kernel parameters of ``script`` (an instance) with every ``~self.NAME`` pointer resolved to the pointer
    type of the instance's attribute: what its kernel is built with. Computed once per instance."""
    resolved = script.__dict__.get("_warpspec_parameters")
    if resolved is None:
        cls = type(script)
        result = []
        for p in parameters(cls):
            if isinstance(p.annotation, InstancePointer):
                dtype = getattr(script, p.annotation.attribute, None)
                if not isinstance(dtype, DType):
                    raise CompileError(f"{cls.__name__}: parameter {p.name!r} is annotated {p.annotation!r}, but "
                                       f"self.{p.annotation.attribute} is {dtype!r}, not a dtype (float16, ...)")
                p = Parameter(p.name, PointerType(dtype), p.default)
            result.append(p)
        resolved = script.__dict__["_warpspec_parameters"] = tuple(result)
    return resolved


def bind_arguments(script_cls, args: tuple, kwargs: dict) -> tuple[dict, dict]:
    """Split call arguments into (runtime values, compile-time values), both by parameter name."""
    params = parameters(script_cls)
    names = [p.name for p in params]
    if len(args) > len(params):
        raise ArgumentError(f"{script_cls.__name__} takes {len(params)} arguments ({', '.join(names)}), "
                            f"got {len(args)}")
    values = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise ArgumentError(f"{script_cls.__name__} has no parameter {key!r}; parameters: {', '.join(names)}")
        if key in values:
            raise ArgumentError(f"{script_cls.__name__}: argument {key!r} given twice")
        values[key] = value
    runtime, compile_time = {}, {}
    for p in params:
        if p.name not in values:
            if p.default is ast:
                raise ArgumentError(f"{script_cls.__name__}: missing argument {p.name!r}")
            values[p.name] = p.default
        value = values[p.name]
        if p.runtime:
            runtime[p.name] = value
        else:
            if not isinstance(value, p.annotation) or (p.annotation is int and isinstance(value, bool)):
                if not (p.annotation is float and isinstance(value, int) and not isinstance(value, bool)):
                    raise ArgumentError(f"{script_cls.__name__}: argument {p.name!r} is compile-time "
                                        f"{p.annotation.__name__}, got {type(value).__name__} {value!r}")
            compile_time[p.name] = p.annotation(value)
    return runtime, compile_time


def build_kernel(script, compile_time: dict) -> ir.Kernel:
    """Build the IR of ``script``'s kernel for these compile-time argument values."""
    cls = type(script)
    function = kernel_function(cls)
    node, path = _parse_function(function)
    builder = Interpreter()
    language = Language(builder)
    builder.language = language
    builder.globals, builder.file = function.__globals__, path
    builder.loc = ir.Loc(path, node.lineno)
    self_value = _ScriptSelf(script, language, cls)
    scope = {node.args.args[0].arg: Binding(self_value, 0)}
    params = []
    for p in script_parameters(script):
        if p.runtime:
            dtype = p.annotation.dtype if isinstance(p.annotation, PointerType) else p.annotation
            var = ir.Var(p.name, int64 if isinstance(p.annotation, PointerType) else dtype)
            builder.declare_parameter(var, p.annotation.dtype if isinstance(p.annotation, PointerType) else None)
            params.append(ir.Param(p.name, p.annotation, var))
            scope[p.name] = Binding(var, 0)
        else:
            scope[p.name] = Binding(compile_time[p.name], 0)
    body = builder.build_body(node.body, scope)
    attrs = language.attrs
    loc = ir.Loc(path, node.lineno)
    # A missing launch attribute is named where its partner is set, where the author will add it.
    if attrs.warps is None:
        raise CompileError("the kernel never sets self.attrs.warps (the threads of a block: 32 per warp); set it "
                           "beside self.attrs.blocks", str(attrs.set_at.get("blocks", loc)))
    if attrs.blocks is None:
        raise CompileError("the kernel never sets self.attrs.blocks (the grid); set it beside self.attrs.warps",
                           str(attrs.set_at.get("warps", loc)))
    constants = tuple(sorted(compile_time.items())) + tuple(sorted(script.schedule().items()))
    kernel = ir.Kernel(script.kernel_name(), tuple(params), attrs.blocks, attrs.warps, attrs.cluster_blocks,
                       body, constants, loc, grid_loc=attrs.set_at["blocks"])
    return analyse(kernel, builder.target)


class _ScriptSelf:
    """``self`` inside a Script kernel: language members first, then the author's helper methods, then
    compile-time attributes set in ``__init__``."""

    def __init__(self, script, language: Language, cls):
        self.script, self.language, self.cls = script, language, cls

    def get_attribute(self, name: str):
        member = self.language.lookup(name)
        if member is not None:
            return member
        attribute = getattr(self.cls, name, None)
        if callable(attribute) and hasattr(attribute, "__code__") and not _base_member(self.cls, name):
            return InlineFunction(attribute, self)
        if name in vars(self.script):
            return vars(self.script)[name]
        if hasattr(self.cls, name) and not name.startswith("_"):
            return attribute  # a class attribute: a compile-time value like any other
        raise self.language.b.error(f"self.{name} is neither part of the language nor set in "
                                    f"{self.cls.__name__}.__init__ or its class")

    def set_attribute(self, name: str, value) -> None:
        raise self.language.b.error(f"cannot set self.{name} inside a kernel; use a local variable (only "
                                    f"self.attrs.* can be set)")


def _base_member(cls, name: str) -> bool:
    """Whether ``name`` comes from warpspec's own Script base class (``schedule``, ``__init__``), not the author's
    class: a Script class marks its base with ``__warpspec_base__``."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return "__warpspec_base__" in vars(klass)
    return False
