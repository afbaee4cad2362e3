"""The build context: what the instruction families see of the front end while a kernel is built.

``KernelContext`` implements ``warpspec.isa.contracts.BuildContext``, the Protocol a family's ``@language_call``
methods are written against (``self.b``): where the call stands (the kernel line, runtime nesting, the innermost
thread group), argument conversions, CompileErrors at the kernel line and the IR block statements are emitted into.
Its stacks (blocks being built, thread groups, name scopes) are its own; families change them only through
``nested`` and ``enter_thread_group``. The AST interpreter (``warpspec.frontend.interpreter.Interpreter``) is a
KernelContext that also walks the kernel's Python source.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from warpspec.dtypes import DType, boolean, float32, int8, int32, int64, uint32
from warpspec import target as targets
from warpspec.errors import CompileError
from warpspec.frontend.bindings import Binding
from warpspec.isa.values import TensorValue, describe
from warpspec.ir import nodes as ir
from warpspec.ir.rewrite import map_exprs

_INTEGER_RANK = {boolean: 0, int8: 1, int32: 2, uint32: 3, int64: 4}


def common_type(a: DType, b: DType) -> DType:
    """The type two runtime scalar operands meet in: a float beats an integer; of two floats the wider one, and
    float32 for two different floats of one width (float16 and bfloat16, or the two float8 types, hold none of each
    other's values); of two integers the one ranked higher in bool < int8 < int32 < uint32 < int64."""
    if a == b:
        return a
    if a.is_float or b.is_float:
        if not (a.is_float and b.is_float):
            return a if a.is_float else b
        return a if a.nbytes > b.nbytes else b if b.nbytes > a.nbytes else float32
    return a if _INTEGER_RANK[a] >= _INTEGER_RANK[b] else b


class KernelContext:
    """The state of one kernel being built and the services the families use (``BuildContext``)."""

    def __init__(self, target: targets.Target = targets.DEFAULT):
        self.target = target
        self.depth = 0  # runtime if/for nesting
        self.loc = ir.Loc("<kernel>", 0)
        self.language = None  # the object `self` stands for in a Script, set by build_kernel
        self._blocks: list[list[ir.Stmt]] = [[]]  # the statements of each block being built, innermost last
        self._groups: list[tuple[int, int, bool]] = []  # (begin, count, single_thread), innermost last
        self._scopes: list[dict[str, Binding]] = []  # the names bound in each scope, innermost last
        self._block_threads: int | None = None  # set once attrs.warps is known
        self._pointer_params: dict[ir.Var, DType] = {}  # pointer parameter Var -> pointee DType
        self._assigning: str | None = None  # the name being assigned, to name the tensor its value makes
        #: The register tensors (their declarations) the call being evaluated moves into its helper's parameters
        #: (``x = self.helper(x)``): the helper may compute into them.
        self._moving: frozenset = frozenset()
        self._assigned = None  # the expression node whose value is assigned to it (its operands are not)
        self._returning: str | None = None  # the name the inlined helper's return value is assigned to
        #: What the host knows of runtime variables before the launch (the grid is computed there), by uid: the
        #: current value over the parameters' launch values, or (a str) what makes it unknown. Parameters start as
        #: themselves; a variable assigned inside a runtime loop, a branch or a thread group is dropped.
        self._host_values: dict[int, ir.Expr | str] = {}
        self._named_syncs: set[tuple[int, int]] = set()  # thread groups that use a named barrier for sync()

    # ------------------------------------------------------------------------------------------------ emitting

    def error(self, message: str) -> CompileError:
        """A CompileError at the statement being built."""
        return CompileError(message, str(self.loc))

    def emit(self, stmt: ir.Stmt) -> ir.Stmt:
        """Append ``stmt`` to the block being built."""
        self._blocks[-1].append(stmt)
        return stmt

    def nested(self, build) -> tuple[ir.Stmt, ...]:
        """Run ``build()`` collecting the statements it emits into a new list."""
        self._blocks.append([])
        try:
            build()
        finally:
            body = self._blocks.pop()
        return tuple(body)

    # ---------------------------------------------------------------------------------------- thread groups

    @property
    def group(self) -> tuple[int, int, bool]:
        """The innermost thread group as (begin, count, single_thread); the whole block outside any group."""
        if self._groups:
            return self._groups[-1]
        return (0, self.block_threads(), False)

    def block_threads(self) -> int:
        """Threads per block; a CompileError while ``self.attrs.warps`` is not set."""
        if self._block_threads is None:
            raise self.error("set self.attrs.warps before using thread groups or instructions")
        return self._block_threads

    def threads(self) -> tuple[int, int]:
        """(begin, count) of the threads that execute an instruction emitted here: 1 inside single_thread."""
        begin, count, single = self.group
        return (begin, 1) if single else (begin, count)


    def in_thread_group(self) -> bool:
        """Whether statements built here are inside a thread group or single_thread."""
        return bool(self._groups)

    @contextmanager
    def enter_thread_group(self, begin: int, count: int, single: bool) -> Iterator[None]:
        """Build the statements inside on threads ``[begin, begin + count)`` (one of them when ``single``)."""
        # A group's names are its own: values computed by some threads do not exist on the others.
        self._groups.append((begin, count, single))
        self._scopes.append({})
        try:
            yield
        finally:
            self._scopes.pop()
            self._groups.pop()

    def claim_named_barrier(self, begin: int, count: int) -> int:
        """Record that thread group ``[begin, begin + count)`` syncs with a named barrier; how many distinct
        groups do now."""
        self._named_syncs.add((begin, count))
        return len(self._named_syncs)

    def set_block_threads(self, count: int) -> None:
        """The block's thread count, once ``self.attrs.warps`` sets it."""
        self._block_threads = count

    # -------------------------------------------------------------------------------------------- conversions

    def to_expr(self, value, dtype: DType | None = None, what: str = "value") -> ir.Expr:
        """A runtime Expr for ``value`` (a Python scalar or an Expr), converted to ``dtype`` when given."""
        if isinstance(value, ir.Expr):
            if dtype is not None and value.dtype != dtype:
                return ir.Convert(value, dtype)
            return value
        if isinstance(value, bool):
            return ir.Const(value, dtype or boolean)
        if isinstance(value, int):
            target = dtype or (int32 if -2**31 <= value < 2**31 else int64)
            if target.is_integer:
                _check_int_range(self, value, target)
            return ir.Const(float(value) if target.is_float else value, target)
        if isinstance(value, float):
            target = dtype or float32
            return ir.Const(value if target.is_float else int(value), target)
        raise self.error(f"{what} must be a scalar, got {describe(value)}")

    def to_integer(self, value, dtype: DType, what: str) -> ir.Expr:
        """An integer Expr of ``dtype`` for ``value``; a float (compile-time or runtime) is a CompileError naming
        ``what``, never truncated."""
        if isinstance(value, float) or (isinstance(value, ir.Expr) and value.dtype.is_float):
            shown = repr(value) if isinstance(value, float) else describe(value)
            raise self.error(f"{what} must be an integer, got {shown}; convert it with int(...) or use // for "
                             f"integer division")
        if not isinstance(value, (int, ir.Expr)):
            raise self.error(f"{what} must be an integer, got {describe(value)}")
        return self.to_expr(value, dtype, what)

    def to_index(self, value, what: str) -> ir.Expr:
        """An int32 index or offset (see ``to_integer``)."""
        return self.to_integer(value, int32, what)

    def to_int(self, value, what: str) -> int:
        """``value`` as a compile-time int, or a CompileError naming ``what``."""
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, ir.Expr):
                raise self.error(f"{what} must be known at compile time, but it depends on runtime values")
            raise self.error(f"{what} must be an int, got {describe(value)}")
        return value

    def to_tensor(self, value, what: str, kinds=None) -> TensorValue:
        """``value`` as a tensor (of one of ``kinds`` when given), or a CompileError naming ``what``."""
        if not isinstance(value, TensorValue):
            raise self.error(f"{what} must be a tensor, got {describe(value)}")
        if kinds and value.kind not in kinds:
            raise self.error(f"{what} must be a {' or '.join(kinds)} tensor, but {value.name} is a {value.kind} "
                             f"tensor")
        return value

    def scalar_for(self, value, dtype: DType, what: str) -> ir.Expr:
        """``value`` as a runtime scalar of ``dtype`` for ``what`` (``the value assigned to 'stage'``): a float
        never silently becomes an integer."""
        if dtype.is_integer:
            return self.to_integer(value, dtype, f"{what} ({dtype.name})")
        return self.to_expr(value, dtype, what)

    def widened(self, value: ir.Expr) -> ir.Expr:
        """A runtime scalar operand of unary arithmetic (``-``, ``~``, ``abs``): bool and int8 as int32, as C++
        computes them (so ``-x`` of an int8 -128 is 128 on both back ends)."""
        return self.to_expr(value, int32) if value.dtype in (boolean, int8) else value

    def scalar_binary(self, symbol: str, a, b) -> ir.Expr:
        """The runtime scalar ``a <symbol> b``: operands promoted to their ``common_type``, Python scalars taking
        the other side's type. Arithmetic on bool or int8 operands is int32 arithmetic, as in C++ (the GPU computes
        narrow integers in 32 bits, so the emulator does too)."""
        a_type = a.dtype if isinstance(a, ir.Expr) else None
        b_type = b.dtype if isinstance(b, ir.Expr) else None
        if a_type is None:
            a_type = _python_type(a, b_type)
        if b_type is None:
            b_type = _python_type(b, a_type)
        common = common_type(a_type, b_type)
        if common == int8 or common == boolean and symbol not in ("&", "|", "^", "==", "!=", "and", "or"):
            common = int32
        if symbol == "/" and common.is_integer:
            raise self.error("'/' on integers is not supported; use '//' (truncating) or cdiv(a, b)")
        if symbol in ("%", "//", "<<", ">>", "&", "|", "^", "cdiv") and common.is_float:
            raise self.error(f"operator {symbol!r} needs integer operands, got {common.name}")
        if isinstance(b, int) and not isinstance(b, bool) and b == 0 and symbol in ("//", "%", "cdiv"):
            raise self.error(f"division by zero in {symbol!r}")
        result_type = boolean if symbol in ir.COMPARISONS or symbol in ("and", "or") else common
        left, right = self.to_expr(a, common), self.to_expr(b, common)
        if symbol in ("and", "or"):
            left, right = self.to_expr(left, boolean), self.to_expr(right, boolean)
        return ir.Binary(symbol, left, right, result_type)

    # --------------------------------------------------------------------------------------------- the kernel

    def declare_parameter(self, var: ir.Var, pointee: DType | None) -> None:
        """Kernel parameter ``var``, whose launch value the host knows; ``pointee`` is the element type of a
        pointer parameter (None for a scalar one)."""
        self._host_values[var.uid] = var
        if pointee is not None:
            self._pointer_params[var] = pointee

    def pointer_dtype(self, value) -> DType | None:
        """The element type of the kernel's pointer parameter ``value``; None when ``value`` is not one."""
        if not isinstance(value, ir.Var):
            return None
        return self._pointer_params.get(value)

    def kernel_attribute(self, name: str):
        """``self.attrs.<name>`` of the kernel as set so far."""
        return getattr(self.language.attrs, name)


    def new_register_tensor(self, name: str, dtype: DType, shape) -> ir.TensorDecl:
        """The declaration of a register tensor defined by the statement being built, named as the variable it is
        assigned to (``name`` when it is an operand or assigned to none: ``target_name``)."""
        return ir.TensorDecl(self.target_name(name), ir.REGISTER, dtype, tuple(shape), self.loc)

    def host_value(self, expr: ir.Expr, root: bool = False) -> ir.Expr | str:
        """``expr`` as the host computes it before the launch, over the parameters' launch values (top-level
        variables replaced by their current values), or what makes it unknown there: ``blockIdx.x``, ``'tiles', a
        runtime variable assigned inside a runtime loop, ...``, ``'first', which depends on blockIdx.x``
        (``root``: the first cause alone, without the variable it came through)."""
        for leaf in ir.leaves(expr):
            if isinstance(leaf, ir.Special):
                return leaf.name
            if isinstance(leaf, ir.Load):
                return f"an element of register tensor {leaf.tensor.decl.name}"
            if isinstance(leaf, ir.Var):
                known = self._host_values.get(leaf.uid)
                if known is None:
                    return (f"{leaf.name!r}, a runtime variable assigned inside a runtime loop, a branch or a thread "
                            f"group")
                if isinstance(known, str):
                    return known if root else f"{leaf.name!r}, which depends on {known}"
        return self._substitute_host_values(expr)

    def _substitute_host_values(self, expr: ir.Expr) -> ir.Expr:
        """``expr`` with every variable replaced by its (known) host value."""
        return map_exprs(expr, lambda e: self._host_values[e.uid] if isinstance(e, ir.Var) else e)

    def target_name(self, default: str) -> str:
        """The variable name the value being built is assigned to, to name tensors as the author did: in
        ``total = tile * 2.0 + row`` the sum is ``total``, the product (an operand) is ``default``."""
        return self._assigning or default


def _python_type(value, other: DType | None) -> DType:
    if isinstance(value, bool):
        return boolean
    if isinstance(value, int):
        if other is not None and other.is_integer:
            return other
        if other is not None and other.is_float:
            return float32
        return int32 if -2**31 <= value < 2**31 else int64
    if isinstance(value, float):
        return float32
    raise CompileError(f"expected a scalar, got {describe(value)}")


def _check_int_range(context: KernelContext, value: int, dtype: DType) -> None:
    bits = dtype.nbits
    low, high = (0, 2**bits) if dtype.kind == "uint" else (-2**(bits - 1), 2**(bits - 1))
    if dtype == boolean:
        low, high = 0, 2
    if not low <= value < high:
        raise context.error(f"{value} does not fit in {dtype.name}")
