"""Python source → IR: the AST interpreter.

The front end walks the AST of a Script's ``__call__`` (and of every helper it calls, inlined) as an abstract
interpreter: names hold compile-time Python values, runtime scalars (IR ``Expr``s) or handles (tensors, language
objects, Class instances). Anything over compile-time values is computed in Python; anything touching a runtime value
becomes IR. Language calls (``self.mbarrier.wait(...)``) are methods of the instruction families in
``warpspec.isa``: the builder binds their arguments, then they check their placement and emit IR statements
through the build context (``warpspec.frontend.context``, which the interpreter is). Helper methods and ``warpspec.Class`` methods are inlined; every line built inside one carries the call
site it was inlined at, so errors name the user's line first.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import operator
import os
import textwrap
from dataclasses import replace
from functools import lru_cache

from warpspec.dtypes import DType, boolean, float32, int32
from warpspec import target as targets
from warpspec.errors import CompileError
from warpspec.frontend.bindings import Binding, ClassInstance, InlineFunction
from warpspec.frontend.context import KernelContext, _python_type, common_type
from warpspec.isa import elementwise
from warpspec.isa.memory import StoreElement
from warpspec.isa.values import RuntimeRange, TensorValue, describe
from warpspec.ir import nodes as ir
from warpspec.ir.rewrite import map_exprs, replace_uses

_PY_BINOPS = {
    ast.Add: ("+", operator.add), ast.Sub: ("-", operator.sub), ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv), ast.FloorDiv: ("//", operator.floordiv), ast.Mod: ("%", operator.mod),
    ast.BitAnd: ("&", operator.and_), ast.BitOr: ("|", operator.or_), ast.BitXor: ("^", operator.xor),
    ast.LShift: ("<<", operator.lshift), ast.RShift: (">>", operator.rshift), ast.Pow: ("**", operator.pow),
}
_PY_COMPARE = {
    ast.Lt: ("<", operator.lt), ast.LtE: ("<=", operator.le), ast.Gt: (">", operator.gt),
    ast.GtE: (">=", operator.ge), ast.Eq: ("==", operator.eq), ast.NotEq: ("!=", operator.ne),
    ast.Is: (None, operator.is_), ast.IsNot: (None, operator.is_not),
    ast.In: (None, lambda a, b: a in b), ast.NotIn: (None, lambda a, b: a not in b),
}
#: Inlined calls nested deeper than this are a helper that calls itself (directly or through others). A level costs
#: the front end's visitors 26 Python frames for a call under a thread group, a loop and a branch, so 16 levels stay
#: well below Python's default limit of 1000 frames: the error is a CompileError, never a RecursionError.
MAX_INLINE_DEPTH = 16


class _Return(Exception):
    def __init__(self, value):
        self.value = value


@lru_cache(maxsize=None)
def _parse_function(function) -> tuple[ast.FunctionDef, str]:
    """The AST of ``function`` with line numbers of its file, and the file's path."""
    try:
        lines, first_line = inspect.getsourcelines(function)
        # The real path, so a kernel reached through different spellings generates identical source (cache keys).
        path = os.path.realpath(inspect.getsourcefile(function) or "<unknown>")
    except (OSError, TypeError) as error:
        raise CompileError(f"cannot read the source of {function.__qualname__}: {error}; kernels must be defined "
                           f"in a file") from None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first_line - 1)
    node = tree.body[0]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise CompileError(f"{function.__qualname__} is not a plain function definition")
    return node, path


def _assigned_names(body: list[ast.stmt]) -> set[str]:
    """The names ``body`` binds anywhere in it (assignments, loop targets, ``with ... as``), not counting those of
    nested functions, lambdas and comprehensions, which have scopes of their own."""
    names: set[str] = set()
    pending: list[ast.AST] = list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp,
                             ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        pending.extend(ast.iter_child_nodes(node))
    return names


class Interpreter(KernelContext):
    """Builds one ``ir.Kernel`` from a Script instance and its compile-time arguments by walking its Python AST;
    the families it calls see it as their build context."""

    def __init__(self, target: targets.Target = targets.DEFAULT):
        super().__init__(target)
        self.file = "<kernel>"
        self.globals: dict = {}
        self.function_depth: int | None = None  # runtime depth at which the inlined function being built began
        self.function_groups = 0  # thread groups open when it began
        self.call_site: ir.Loc | None = None  # where the function being inlined was called (None: the kernel body)
        self.function_name: str | None = None  # its qualified name
        self.inline_depth = 0

    def build_body(self, body: list[ast.stmt], scope: dict[str, Binding]) -> tuple[ir.Stmt, ...]:
        """The statements of the kernel body ``body``, run with the names of ``scope`` (``self`` and the
        parameters)."""
        self._scopes = [scope]
        self.exec_body(body)
        return tuple(self._blocks[0])

    # ------------------------------------------------------------------------------------------------- scopes

    def lookup(self, name: str):
        for scope in reversed(self._scopes):
            if name in scope:
                return scope[name].value
        if name in self.globals:
            return self.globals[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise self.error(f"unknown name {name!r}")

    def _find_binding(self, name: str) -> Binding | None:
        for scope in reversed(self._scopes):
            if name in scope:
                return scope[name]
        return None

    def bind(self, name: str, value, annotation: DType | None = None) -> None:
        """Assign ``value`` to a name: declares or updates a runtime variable, or binds a compile-time value."""
        existing = self._find_binding(name)
        self._store(existing, value, annotation, name, lambda b: self._scopes[-1].__setitem__(name, b))

    def _store(self, existing: Binding | None, value, annotation, name: str, create) -> None:
        if name == "_":  # a throwaway: every binding is new
            existing = None
        scalar = isinstance(value, (ir.Expr, int, float, bool))
        if existing is not None and existing.borrowed and isinstance(existing.value, ir.Var) \
                and (scalar or annotation is not None):
            caller = existing.value
            own = self._own_variable(name, existing)
            if isinstance(value, ir.Expr):  # k = k + 1: the right side reads the helper's own k too
                value = map_exprs(value, lambda e: own if e is caller else e)
        if existing is not None and isinstance(existing.value, ir.Var) and annotation is None and not scalar:
            # A name that held a runtime scalar now names a tensor, a tuple, an object...: a new binding.
            if existing.depth < self.depth:
                raise self.error(f"{name!r} holds a runtime {existing.value.type.name} variable bound outside this "
                                 f"runtime loop or branch; it cannot be rebound inside it to {describe(value)}")
            create(Binding(value, self.depth))
            return
        if annotation is not None:
            if existing is not None and isinstance(existing.value, ir.Var) and existing.depth == self.depth:
                self._assign_var(existing.value, value, name)
                return
            self._declare(name, annotation, value, create)
            return
        if existing is not None and isinstance(existing.value, ir.Var):
            self._assign_var(existing.value, value, name)
            return
        if isinstance(value, ir.Expr):
            if existing is not None and existing.depth < self.depth:
                raise self.error(f"{name!r} holds a compile-time value bound outside this runtime loop or branch; "
                                 f"declare it with a type (e.g. '{name}: int32 = ...') to make it a runtime variable")
            self._declare(name, value.dtype, value, create)
            return
        if existing is not None and existing.depth < self.depth:
            if isinstance(value, TensorValue) and isinstance(existing.value, TensorValue):
                if existing.borrowed:
                    self._copy_of_own(name, existing)
                alias = self._alias_of(name, existing.value)
                if alias is not None:
                    raise self.error(f"{name!r} and {alias!r} are one tensor ({name} = {alias} bound the same "
                                     f"registers): updating {name!r} inside this runtime loop or branch would "
                                     f"change {alias!r} too; bind a copy before it ({name} = {alias} + 0.0)")
                if self._assign_in_place(existing.value, value) or self._copy_into(existing.value, value):
                    return
            elif existing.value is value or _same_constant(existing.value, value):
                return
            raise self.error(f"{name!r} was bound outside this runtime loop or branch and cannot be rebound inside "
                             f"it to a different compile-time value or tensor"
                             + (f" ({describe(value)} has another shape, dtype or kind than {describe(existing.value)})"
                                if isinstance(value, TensorValue) and isinstance(existing.value, TensorValue) else ""))
        if isinstance(value, TensorValue) and existing is not None and isinstance(existing.value, TensorValue):
            # A name that shares its tensor with another (b = a, or a helper's parameter and its caller's argument)
            # is rebound, as Python does, not computed into it.
            if not existing.borrowed and self._alias_of(name, existing.value) is None \
                    and self._assign_in_place(existing.value, value):
                return
        create(Binding(value, self.depth))

    def _copy_of_own(self, name: str, binding: Binding) -> None:
        """A helper's parameter that a runtime loop or branch assigns (``_copy_updated_parameters``, at the loop's
        or branch's start): the update must go into registers that live across it, and never into the caller's
        tensor, so the parameter gets a copy of its own, made where it was bound, and is rebound to it there. The
        body is built after the copy, so every read of the name in it reads the copy (the value the name carries
        from one iteration to the next), and another name bound to the caller's tensor before (``u = t``) still
        reads the caller's."""
        tensor = binding.value
        if not tensor.dtype.is_float:
            raise self.error(f"{name!r} is a parameter bound to the caller's {tensor.dtype.name} tensor: updating it "
                             f"inside this runtime loop or branch would change the caller's tensor too; bind a copy "
                             f"before it, or return the new value")
        decl = ir.TensorDecl(name, ir.REGISTER, tensor.dtype, tuple(tensor.shape), self.loc)
        binding.block.append(elementwise.Cast(self.loc, decl, tensor.ref))  # a copy: the same type
        binding.value, binding.borrowed = TensorValue(ir.TensorRef(decl)), False

    def _copy_updated_parameters(self, body: list[ast.stmt]) -> None:
        """Before a runtime loop or branch is built: each helper parameter bound to its caller's float tensor that
        ``body`` assigns (anywhere in it, nested loops and branches included) gets its copy of its own now. Made
        at the assignment instead, the copy would come after the body's earlier reads of the parameter, which
        would then read the caller's tensor in every iteration (``t = t + 1.0`` in a loop of n gave t + 1)."""
        for name in _assigned_names(body):
            binding = self._find_binding(name)
            if binding is not None and binding.borrowed and isinstance(binding.value, TensorValue) \
                    and binding.value.dtype.is_float:
                self._copy_of_own(name, binding)

    def _own_variable(self, name: str, binding: Binding) -> ir.Var:
        """A helper's parameter bound to its caller's runtime variable, or a runtime loop's variable, given a new
        value: the name gets a variable of its own, declared with the old value where the name was bound (where the
        helper was called; at the top of the loop's body), so the assignment leaves the caller's variable and the
        loop's counter alone, as Python's rebinding does. Before, ``k = k + 1`` in a helper changed the caller's
        ``k``, and on the GPU a loop variable given a new value changed the loop's iterations (not on the
        emulator). What the loops and branches around the assignment already read of the name reads the new
        variable, as for a tensor's copy."""
        caller = binding.value
        own = ir.Var(name, caller.type)
        binding.block.append(ir.Declare(self.loc, own, caller))
        self._track_host_value(own, caller)
        binding.value, binding.borrowed = own, False
        self._rewrite_open_blocks(binding, lambda stmt: replace_uses(stmt, caller, own))
        return own

    def _rewrite_open_blocks(self, binding: Binding, rewrite) -> None:
        """Apply ``rewrite`` to every statement already built in the blocks opened inside ``binding``'s block (the
        runtime loops and branches around the statement being built)."""
        start = next(i for i, block in enumerate(self._blocks) if block is binding.block)
        for block in self._blocks[start + 1:]:
            block[:] = [rewrite(stmt) for stmt in block]

    def _alias_of(self, name: str, tensor: TensorValue) -> str | None:
        """Another name of this function's scopes bound to ``tensor``'s registers (``b = a``), or an element of a
        list or tuple bound to a name (``b = parts[0]``, spelt so), or None: computing a new value into them in
        place would change that value too."""
        for scope in self._scopes:
            for other, binding in scope.items():
                for label, value in _tensors_in(binding.value, other):
                    if (label != name and value.ref.decl is tensor.ref.decl and not value.ref.index):
                        return label
        return None

    def _declare(self, name: str, dtype: DType, value, create) -> None:
        var = ir.Var(name, dtype)
        expr = self.scalar_for(value, dtype, f"the value assigned to {name!r}")
        self.emit(ir.Declare(self.loc, var, expr))
        self._track_host_value(var, expr)
        create(Binding(var, self.depth))

    def _assign_var(self, var: ir.Var, value, name: str) -> None:
        expr = self.scalar_for(value, var.type, f"the value assigned to {name!r}")
        self.emit(ir.Assign(self.loc, var, expr))
        self._track_host_value(var, expr)

    def _track_host_value(self, var: ir.Var, expr: ir.Expr) -> None:
        """Record what the host knows of ``var`` after it is set to ``expr`` here: its value when the statement runs
        once per block in every thread (outside runtime loops, branches and thread groups), nothing otherwise."""
        if self.depth == 0 and not self._groups:
            # An unknown value keeps only its first cause, so a chain of updates (x = x + 1) stays one phrase.
            self._host_values[var.uid] = self.host_value(expr, root=True)
        else:
            self._host_values.pop(var.uid, None)

    def _assign_in_place(self, target: TensorValue, value: TensorValue) -> bool:
        """``acc = acc * 2``: when the new register tensor was just computed and matches the old one, compute it
        into the old tensor instead, so loops update one tensor rather than rebinding a name."""
        last = self._blocks[-1][-1] if self._blocks[-1] else None
        if not (isinstance(last, ir.DefineTensor) and last.decl is value.ref.decl and target.kind == ir.REGISTER
                and not target.ref.index and target.shape == value.shape and target.dtype == value.dtype):
            return False
        self._blocks[-1][-1] = replace(last, decl=target.ref.decl)
        return True

    def _copy_into(self, target: TensorValue, value: TensorValue) -> bool:
        """``a, b = b, a + b`` inside a runtime loop: a new value that is not the statement just built (another
        name's tensor, or one computed before the last) is copied into the loop's tensor, which then holds it as
        Python's rebinding would (later updates of either tensor leave the other alone)."""
        if not (target.kind == ir.REGISTER and value.kind == ir.REGISTER and not target.ref.index
                and not value.ref.transposed and target.shape == value.shape and target.dtype == value.dtype):
            return False
        self.emit(elementwise.Cast(self.loc, target.ref.decl, value.ref))  # a copy: the same type
        return True

    # -------------------------------------------------------------------------------------------------------- inlining

    def call_function(self, function, receiver, args, kwargs):
        """Inline a Python function written in the language; returns what it returns."""
        node, path = _parse_function(function)
        name = function.__qualname__
        receivers = [receiver] if receiver is not None else []
        bound = self.bind_call(inspect.signature(function), name, receivers + list(args), kwargs, len(receivers))
        bound.apply_defaults()
        if self.inline_depth >= MAX_INLINE_DEPTH:
            # Name the line where the repetition began (the first inlined line of this function), not the
            # whole chain of identical frames below it.
            start = next((frame for frame in self.loc.frames() if frame.function == name), self.loc)
            raise CompileError(f"{name}() calls itself (directly or through other helpers): helpers are inlined, "
                               f"and this call would nest them deeper than {MAX_INLINE_DEPTH} levels; repeat at run "
                               f"time with a loop (self.range), and end a compile-time recursion within "
                               f"{MAX_INLINE_DEPTH} levels", str(start))
        saved = (self._scopes, self.globals, self.file, self.loc, self.call_site, self.function_name)
        # Only the statement's own call moves its arguments; calls inside the helper start afresh.
        moving, self._moving = self._moving, frozenset()
        self._scopes = [{name: Binding(value, self.depth, block=self._blocks[-1],
                                       borrowed=(_register_tensor(value) and value.ref.decl not in moving)
                                       or isinstance(value, ir.Var))
                         for name, value in bound.arguments.items()}]
        self.globals = function.__globals__
        self.file = path
        self.call_site, self.function_name = self.loc, function.__qualname__
        saved_frame = (self.function_depth, self.function_groups, self._returning)
        self.function_depth, self.function_groups = self.depth, len(self._groups)
        self._returning = self._assigning  # ``x = helper(...)``: what the helper returns is x
        self.inline_depth += 1
        result = None
        try:
            self.exec_body(node.body)
        except _Return as ret:
            result = ret.value
        finally:
            self._scopes, self.globals, self.file, self.loc, self.call_site, self.function_name = saved
            self.function_depth, self.function_groups, self._returning = saved_frame
            self.inline_depth -= 1
        return result

    def instantiate(self, cls, args, kwargs) -> ClassInstance:
        instance = ClassInstance(cls)
        init = getattr(cls, "__init__", None)
        if init is not None and init is not object.__init__:
            self.call_function(init, instance, args, kwargs)
        return instance

    # ------------------------------------------------------------------------------------------------------ statements

    def exec_body(self, body) -> None:
        for stmt in body:
            self.exec_stmt(stmt)

    def exec_stmt(self, node: ast.stmt) -> None:
        self.loc = loc = ir.Loc(self.file, node.lineno, self.call_site, self.function_name)
        method = getattr(self, "stmt_" + type(node).__name__, None)
        if method is None:
            raise self.error(f"{type(node).__name__} statements are not part of the kernel language")
        try:
            method(node)
        except CompileError as error:
            if error.location is not None:
                raise
            # A check made away from the builder (a type rule, a layout) names no line: the statement's is the
            # author's.
            raise CompileError(str(error), str(loc)) from None

    def stmt_Expr(self, node: ast.Expr) -> None:
        self.eval(node.value)

    def stmt_Pass(self, node) -> None:
        pass

    def stmt_Return(self, node: ast.Return) -> None:
        if self.function_depth is None:
            raise self.error("a kernel body cannot return a value or end early; write results with store_global "
                             "or a TMA store")
        if self.depth != self.function_depth or len(self._groups) != self.function_groups:
            raise self.error("'return' inside a runtime loop or branch, or inside a thread group, is not supported; "
                             "return at the helper's top level")
        raise _Return(self._eval_as(self._returning, node.value) if node.value is not None else None)

    def stmt_Assert(self, node: ast.Assert) -> None:
        test = self.condition(self.eval(node.test), "assert")
        if isinstance(test, ir.Expr):
            raise self.error("assert needs a compile-time condition")
        if not test:
            message = self.eval(node.msg) if node.msg is not None else "assertion failed"
            raise self.error(str(message))

    def _eval_named(self, target: ast.expr, value: ast.expr):
        name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) \
            else None
        return self._eval_as(name, value)

    def _eval_as(self, name: str | None, value: ast.expr):
        """``value`` evaluated with ``name`` for the tensor it makes (``target_name``)."""
        saved = self._assigning, self._assigned
        self._assigning, self._assigned = name, value
        try:
            return self.eval(value)
        finally:
            self._assigning, self._assigned = saved

    def stmt_Assign(self, node: ast.Assign) -> None:
        self._moving = self._moved_arguments(node)
        try:
            value = self._eval_named(node.targets[0], node.value)
        finally:
            self._moving = frozenset()
        for target in node.targets:
            self.assign(target, value)

    def _moved_arguments(self, node: ast.Assign) -> frozenset:
        """``x = self.helper(x, ...)`` (or ``x, y = ...``): the register tensors that the call's arguments pass by a
        name this statement rebinds, which nothing else names, and which their name does not borrow. Nobody can
        read them after the call, so the helper may compute into them (its parameter is not borrowed): the move
        idiom that keeps a helper's update of a tile from costing a copy."""
        if not isinstance(node.value, ast.Call):
            return frozenset()
        targets = {t.id for target in node.targets for t in ([target] if isinstance(target, ast.Name) else
                                                               getattr(target, "elts", [])) if isinstance(t, ast.Name)}
        passed = [arg for arg in node.value.args if isinstance(arg, ast.Name)]
        passed += [keyword.value for keyword in node.value.keywords if isinstance(keyword.value, ast.Name)]
        names = [arg.id for arg in passed]
        moved = set()
        for arg in passed:
            # A name passed twice is two parameters of one tensor: computing into one would change the other.
            binding = self._find_binding(arg.id) if arg.id in targets and names.count(arg.id) == 1 else None
            if binding is not None and not binding.borrowed and _register_tensor(binding.value) \
                    and self._alias_of(arg.id, binding.value) is None:
                moved.add(binding.value.ref.decl)
        return frozenset(moved)

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        annotation = self.eval(node.annotation)
        if annotation in (int, float, bool):
            annotation = None  # a Python type annotation: an ordinary compile-time binding
        elif not isinstance(annotation, DType):
            raise self.error(f"a variable's annotation must be a scalar type such as int32, got "
                             f"{describe(annotation)}")
        if node.value is None:
            raise self.error("a declaration needs an initial value")
        self.assign(node.target, self._eval_named(node.target, node.value), annotation)

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        current = self.eval(_as_load(node.target))
        value = self.binary(type(node.op), current, self.eval(node.value))
        self.assign(node.target, value)

    def assign(self, target: ast.expr, value, annotation: DType | None = None) -> None:
        if isinstance(target, ast.Name):
            self.bind(target.id, value, annotation)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if annotation is not None or not isinstance(value, (tuple, list)):
                raise self.error(f"cannot unpack {describe(value)} into {len(target.elts)} names")
            if len(value) != len(target.elts):
                raise self.error(f"cannot unpack {len(value)} values into {len(target.elts)} names")
            for element, item in zip(target.elts, value):
                self.assign(element, item)
        elif isinstance(target, ast.Subscript):
            self.assign_element(self.eval(target.value), self.eval(target.slice), value)
        elif isinstance(target, ast.Attribute):
            self.assign_attribute(self.eval(target.value), target.attr, value, annotation)
        else:
            raise self.error(f"cannot assign to {type(target).__name__}")

    def assign_element(self, container, index, value) -> None:
        if isinstance(container, (list, tuple)):
            raise self.error(f"cannot assign to an element of a {type(container).__name__} of {len(container)} "
                             f"items: a kernel's lists and tuples are compile-time values whose items are not "
                             f"rebound; keep a tensor that changes in a name of its own (part0 = part0 + x)")
        if not isinstance(container, TensorValue):
            raise self.error(f"cannot assign to an element of {describe(container)}")
        if container.kind != ir.REGISTER:
            raise self.error(f"elements of {container.kind} tensor {container.name} cannot be assigned; only "
                             f"register tensors have element updates")
        indices = self.element_indices(container, index)
        value = self.scalar_for(value, container.dtype, f"the value stored into {container.name}[...]")
        self.emit(StoreElement(self.loc, container.ref, indices, value))

    def assign_attribute(self, obj, name: str, value, annotation) -> None:
        if isinstance(obj, ClassInstance):
            existing = obj.attributes.get(name)
            self._store(existing, value, annotation, f"{obj.cls.__name__}.{name}",
                        lambda b: obj.attributes.__setitem__(name, b))
            return
        setter = getattr(obj, "set_attribute", None)
        if setter is None:
            raise self.error(f"cannot set attribute {name!r} of {describe(obj)}")
        setter(name, value)

    def condition(self, value, where: str):
        """``value`` as the condition of ``where`` (an ``if``, a conditional expression, ``and``/``or``, an
        ``assert``): a tensor has no single truth value, and Python's would be True whatever it holds."""
        if isinstance(value, TensorValue):
            raise self.error(f"{where} needs a scalar condition, got {describe(value)} {list(value.shape)}: a tensor "
                             f"has no single truth value; choose element by element with self.where(condition, a, b)")
        return value

    def stmt_If(self, node: ast.If) -> None:
        cond = self.condition(self.eval(node.test), "if")
        if not isinstance(cond, ir.Expr):
            self.exec_body(node.body if cond else node.orelse)
            return
        cond = self.to_expr(cond, boolean) if cond.dtype != boolean else cond
        loc = self.loc
        self._copy_updated_parameters(node.body + node.orelse)
        then = self.runtime_block(lambda: self.exec_body(node.body))
        orelse = self.runtime_block(lambda: self.exec_body(node.orelse))
        self.emit(ir.If(loc, cond, then, orelse))

    def runtime_block(self, build) -> tuple[ir.Stmt, ...]:
        """Statements under runtime control flow: a new scope one runtime level deeper."""
        self.depth += 1
        self._scopes.append({})
        try:
            return self.nested(build)
        finally:
            self._scopes.pop()
            self.depth -= 1

    def stmt_For(self, node: ast.For) -> None:
        if node.orelse:
            raise self.error("for ... else is not supported")
        iterable = self.eval(node.iter)
        if isinstance(iterable, RuntimeRange):
            if not isinstance(node.target, ast.Name):
                raise self.error("a runtime loop needs a single loop variable")
            loc = self.loc
            var = ir.Var(node.target.id, iterable.start.dtype)
            self._copy_updated_parameters(node.body)

            def body():
                # Borrowed: a new value for the name is a variable of its own, as Python rebinds it, never the
                # counter (the emulator's next iteration takes the counter's next value; C++'s would take the new).
                self._scopes[-1][node.target.id] = Binding(var, self.depth, borrowed=True, block=self._blocks[-1])
                self.exec_body(node.body)

            stmts = self.runtime_block(body)
            self.emit(ir.For(loc, var, iterable.start, iterable.stop, self.to_expr(iterable.step, var.type), stmts,
                             iterable.unroll))
            return
        if isinstance(iterable, ir.Expr) or isinstance(iterable, TensorValue):
            raise self.error("a for loop over runtime values must iterate self.range(...)")
        try:
            items = list(iterable)
        except TypeError:
            raise self.error(f"cannot iterate over {describe(iterable)}") from None
        for item in items:  # compile-time loop: unrolled here
            self.assign(node.target, item)
            self.exec_body(node.body)

    def stmt_While(self, node) -> None:
        raise self.error("while loops are not supported; use self.range(...) or a compile-time range(...)")

    def stmt_Break(self, node) -> None:
        raise self.error("break is not supported in kernels")

    def stmt_Continue(self, node) -> None:
        raise self.error("continue is not supported in kernels")

    def stmt_With(self, node: ast.With) -> None:
        if len(node.items) != 1 or node.items[0].optional_vars is not None:
            raise self.error("a with statement takes exactly one language context, without 'as'")
        context = self.eval(node.items[0].context_expr)
        enter = getattr(context, "build_block", None)
        if enter is None:
            raise self.error(f"{describe(context)} cannot be used in a with statement")
        enter(lambda: self.exec_body(node.body))

    def stmt_FunctionDef(self, node) -> None:
        raise self.error("functions cannot be defined inside a kernel; define a method on the Script instead")

    # ----------------------------------------------------------------------------------------------------- expressions

    def eval(self, node: ast.expr):
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            raise self.error(f"{type(node).__name__} expressions are not part of the kernel language")
        if self._assigning is None or node is self._assigned:
            return method(node)
        # An operand of the assigned expression: the tensors it makes are not the variable.
        saved = self._assigning, self._assigned
        self._assigning = self._assigned = None
        try:
            return method(node)
        finally:
            self._assigning, self._assigned = saved

    def expr_Constant(self, node: ast.Constant):
        return node.value

    def expr_Name(self, node: ast.Name):
        return self.lookup(node.id)

    def expr_Tuple(self, node: ast.Tuple):
        return tuple(self.eval(e) for e in node.elts)

    def expr_List(self, node: ast.List):
        return [self.eval(e) for e in node.elts]

    def expr_Dict(self, node: ast.Dict):
        return {self.eval(k): self.eval(v) for k, v in zip(node.keys, node.values)}

    def expr_JoinedStr(self, node: ast.JoinedStr):
        parts = []
        for value in node.values:
            part = self.eval(value.value) if isinstance(value, ast.FormattedValue) else value.value
            if isinstance(part, ir.Expr):
                raise self.error("f-strings need compile-time values")
            parts.append(str(part))
        return "".join(parts)

    def expr_ListComp(self, node: ast.ListComp):
        if len(node.generators) != 1 or node.generators[0].ifs or node.generators[0].is_async:
            raise self.error("list comprehensions take one 'for' clause without 'if'")
        generator = node.generators[0]
        iterable = self.eval(generator.iter)
        if isinstance(iterable, (ir.Expr, RuntimeRange, TensorValue)):
            raise self.error("a list comprehension needs a compile-time iterable")
        self._scopes.append({})
        try:
            result = []
            for item in iterable:
                self.assign(generator.target, item)
                result.append(self.eval(node.elt))
            return result
        finally:
            self._scopes.pop()

    def expr_Attribute(self, node: ast.Attribute):
        return self.get_attribute(self.eval(node.value), node.attr)

    def get_attribute(self, obj, name: str):
        if isinstance(obj, ClassInstance):
            if name in obj.attributes:
                return obj.attributes[name].value
            member = getattr(obj.cls, name, None)
            if inspect.isfunction(member):
                return InlineFunction(member, obj)
            language = self.language_attribute(name)
            if language is not None:
                return language
            if member is not None:
                return member
            raise self.error(f"{obj.cls.__name__} instance has no attribute {name!r}")
        if isinstance(obj, TensorValue):
            if name in ("shape", "dtype", "kind"):
                return getattr(obj, name)
            if name == "nbytes":
                if obj.kind == ir.GLOBAL:
                    raise self.error(f"{obj.name}.nbytes: a global view's size is not known at compile time")
                return obj.ref.nbytes
            if name == "transpose":
                return lambda: self.transpose(obj)
            raise self.error(f"tensor {obj.name} has no attribute {name!r}")
        if isinstance(obj, ir.Expr):
            raise self.error(f"a runtime scalar has no attribute {name!r}")
        getter = getattr(obj, "get_attribute", None)
        if getter is not None:
            return getter(name)
        if name.startswith("_"):
            raise self.error(f"{describe(obj)} attribute {name!r} is private")
        try:
            return getattr(obj, name)
        except AttributeError:
            raise self.error(f"{describe(obj)} has no attribute {name!r}") from None

    def language_attribute(self, name: str):
        """``self.<name>`` of the language (instructions, tensors, roles), or None."""
        return self.language.lookup(name) if self.language is not None else None

    def transpose(self, tensor: TensorValue) -> TensorValue:
        if len(tensor.shape) < 2:
            raise self.error(f"transpose() needs at least 2 dimensions; {tensor.name} has shape "
                             f"{list(tensor.shape)}")
        return TensorValue(replace(tensor.ref, transposed=not tensor.ref.transposed))

    def expr_Subscript(self, node: ast.Subscript):
        container = self.eval(node.value)
        index = self.eval(node.slice)
        if isinstance(container, TensorValue):
            return self.index_tensor(container, index)
        if isinstance(index, ir.Expr):
            raise self.error(f"cannot index {describe(container)} with a runtime value")
        try:
            return container[index]
        except (IndexError, KeyError, TypeError) as error:
            raise self.error(f"bad index {index!r} into {describe(container)}: {error}") from None

    def expr_Slice(self, node):
        raise self.error("slices are not supported; index leading dimensions with integers")

    def element_indices(self, tensor: TensorValue, index) -> tuple[ir.Expr, ...]:
        indices = index if isinstance(index, tuple) else (index,)
        if tensor.ref.transposed:
            raise self.error(f"cannot index elements of transposed tensor {tensor.name}")
        if len(indices) != len(tensor.shape):
            raise self.error(f"{tensor.name} has {len(tensor.shape)} dimensions, indexed with {len(indices)}")
        return tuple(self.check_index(tensor, i, axis) for axis, i in enumerate(indices, len(tensor.ref.index)))

    def check_index(self, tensor: TensorValue, index, axis: int) -> ir.Expr:
        extent = tensor.ref.decl.shape[axis]
        if isinstance(index, int) and not isinstance(index, bool) and isinstance(extent, int):
            if not 0 <= index < extent:
                raise self.error(f"index {index} is out of bounds for dimension {axis} of {tensor.name} "
                                 f"(size {extent})")
        expr = self.to_expr(index, None, f"index of {tensor.name}")
        if not expr.dtype.is_integer:
            raise self.error(f"index of {tensor.name} must be an integer, got {expr.dtype.name}")
        return expr

    def index_tensor(self, tensor: TensorValue, index) -> object:
        indices = index if isinstance(index, tuple) else (index,)
        if tensor.ref.transposed:
            raise self.error(f"index {tensor.name} before transposing it")
        if len(indices) > len(tensor.shape):
            raise self.error(f"{tensor.name} has {len(tensor.shape)} dimensions, indexed with {len(indices)}")
        if tensor.kind == ir.GLOBAL:
            raise self.error(f"global view {tensor.name} cannot be indexed; pass offsets to load_global, "
                             f"store_global or the tma instructions")
        if tensor.kind == ir.REGISTER and len(indices) == len(tensor.shape):
            return ir.Load(tensor.ref, self.element_indices(tensor, index))
        if tensor.kind == ir.REGISTER:
            raise self.error(f"register tensor {tensor.name} can only be indexed element by element")
        start = len(tensor.ref.index)
        exprs = tuple(self.check_index(tensor, i, start + axis) for axis, i in enumerate(indices))
        return TensorValue(replace(tensor.ref, index=tensor.ref.index + exprs))

    def expr_BinOp(self, node: ast.BinOp):
        return self.binary(type(node.op), self.eval(node.left), self.eval(node.right))

    def binary(self, op_type, a, b):
        if op_type not in _PY_BINOPS:
            raise self.error(f"operator {op_type.__name__} is not supported")
        symbol, python_op = _PY_BINOPS[op_type]
        if isinstance(a, TensorValue) or isinstance(b, TensorValue):
            return elementwise.binary(self, symbol, a, b)
        if not isinstance(a, ir.Expr) and not isinstance(b, ir.Expr):
            try:
                return python_op(a, b)
            except Exception as error:  # a compile-time Python error in the kernel's own arithmetic
                raise self.error(f"{a!r} {symbol} {b!r}: {error}") from None
        if symbol == "**":
            raise self.error("** is only supported on compile-time values")
        return self.scalar_binary(symbol, a, b)

    def expr_UnaryOp(self, node: ast.UnaryOp):
        value = self.eval(node.operand)
        symbol = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~", ast.Not: "not"}[type(node.op)]
        if isinstance(value, TensorValue):
            if symbol == "+":
                return value
            if symbol != "-":
                raise self.error(f"unary {symbol!r} on tensors is not supported")
            return elementwise.negate(self, value)
        if not isinstance(value, ir.Expr):
            try:
                return {"-": operator.neg, "+": operator.pos, "~": operator.invert, "not": operator.not_}[symbol](value)
            except Exception as error:  # a compile-time Python error in the kernel's own arithmetic
                raise self.error(f"{symbol} {value!r}: {error}") from None
        if symbol == "+":
            return value
        if symbol == "not":
            return ir.Unary("not", self.to_expr(value, boolean))
        return ir.Unary(symbol, self.widened(value))

    def expr_BoolOp(self, node: ast.BoolOp):
        symbol = "and" if isinstance(node.op, ast.And) else "or"
        result = self.condition(self.eval(node.values[0]), f"'{symbol}'")
        for value_node in node.values[1:]:
            if not isinstance(result, ir.Expr):
                # Python short-circuit on a compile-time left side
                if (symbol == "and" and not result) or (symbol == "or" and result):
                    return result
                result = self.condition(self.eval(value_node), f"'{symbol}'")
                continue
            result = self.scalar_binary(symbol, result, self.condition(self.eval(value_node), f"'{symbol}'"))
        return result

    def expr_Compare(self, node: ast.Compare):
        left = self.eval(node.left)
        result = None
        for op, right_node in zip(node.ops, node.comparators):
            right = self.eval(right_node)
            symbol, python_op = _PY_COMPARE[type(op)]
            if symbol is not None and (isinstance(left, TensorValue) or isinstance(right, TensorValue)):
                if len(node.ops) > 1:
                    raise self.error("tensors compare with one of < <= > >= == != at a time (combine masks with "
                                     "& and |)")
                return elementwise.binary(self, symbol, left, right)
            if symbol is None and (left is None or right is None):
                # ``x is None``: a runtime scalar is never None, so this is known at compile time (an optional
                # argument of a helper given a runtime value or left out)
                part = python_op(left, right)
            elif isinstance(left, ir.Expr) or isinstance(right, ir.Expr):
                if symbol is None:
                    raise self.error(f"{type(op).__name__} needs compile-time operands")
                part = self.scalar_binary(symbol, left, right)
            else:
                part = python_op(left, right)
            result = part if result is None else self.expr_and(result, part)
            left = right
        return result

    def expr_and(self, a, b):
        if not isinstance(a, ir.Expr):
            return b if a else a
        return self.scalar_binary("and", a, b)

    def expr_IfExp(self, node: ast.IfExp):
        cond = self.condition(self.eval(node.test), "a conditional expression")
        if not isinstance(cond, ir.Expr):
            return self.eval(node.body if cond else node.orelse)
        a, b = self.eval(node.body), self.eval(node.orelse)
        if isinstance(a, TensorValue) or isinstance(b, TensorValue):
            raise self.error("a runtime conditional expression cannot choose between tensors")
        a_type = a.dtype if isinstance(a, ir.Expr) else _python_type(a, b.dtype if isinstance(b, ir.Expr) else None)
        b_type = b.dtype if isinstance(b, ir.Expr) else a_type
        common = common_type(a_type, b_type)
        return ir.Select(self.to_expr(cond, boolean), self.to_expr(a, common), self.to_expr(b, common))

    def expr_Call(self, node: ast.Call):
        # What the statement moves goes to this call alone, not to calls made while evaluating its callee and
        # arguments (which must not compute into a tensor this call still reads).
        moving, self._moving = self._moving, frozenset()
        callee = self.eval(node.func)
        args = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                value = self.eval(arg.value)
                if isinstance(value, (ir.Expr, TensorValue)):
                    raise self.error("*args needs a compile-time sequence")
                args.extend(value)
            else:
                args.append(self.eval(arg))
        kwargs = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                kwargs.update(self.eval(keyword.value))
            else:
                kwargs[keyword.arg] = self.eval(keyword.value)
        self._moving = moving
        return self.call(callee, args, kwargs)

    def call(self, callee, args, kwargs):
        if isinstance(callee, InlineFunction):
            return self.call_function(callee.function, callee.receiver, args, kwargs)
        if isinstance(callee, DType):
            if len(args) != 1 or kwargs:
                raise self.error(f"{callee.name}(x) takes one value")
            value = args[0]
            if isinstance(value, ir.Expr):
                return self.to_expr(value, callee)
            return self.to_expr(value, callee).value if isinstance(value, (int, float)) else value
        if isinstance(callee, type) and getattr(callee, "__warpspec_class__", False):
            return self.instantiate(callee, args, kwargs)
        if getattr(callee, "_language_call", False):
            self._check_arguments(callee, args, kwargs)
            return callee(*args, **kwargs)
        special = _RUNTIME_BUILTINS.get(callee)
        runtime_args = any(isinstance(x, (ir.Expr, TensorValue)) for x in list(args) + list(kwargs.values()))
        if special is not None and runtime_args:
            return special(self, *args, **kwargs)
        if not runtime_args:
            try:
                return callee(*args, **kwargs)
            except CompileError:
                raise
            except Exception as error:
                raise self.error(f"{getattr(callee, '__name__', callee)}(...) failed at compile time: "
                                 f"{type(error).__name__}: {error}") from None
        raise self.error(f"{getattr(callee, '__name__', repr(callee))}() cannot take runtime values")

    def bind_call(self, signature: inspect.Signature, name: str, args, kwargs, hidden: int = 0):
        """``signature`` bound to the call's arguments, or a CompileError at the kernel line naming the call and the
        argument that does not fit; ``hidden`` leading parameters (a method's receiver) are not shown."""
        parameters = signature.parameters
        takes = f"it takes ({', '.join(list(parameters)[hidden:])})"
        if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            for keyword in kwargs:
                if keyword not in parameters:
                    raise self.error(f"{name}() has no parameter {keyword!r}; {takes}")
        try:
            return signature.bind(*args, **kwargs)
        except TypeError as error:
            raise self.error(f"{name}(): {error}; {takes}") from None

    def _check_arguments(self, method, args, kwargs) -> None:
        """A CompileError at the kernel line unless ``args``/``kwargs`` fit the language call's parameters."""
        owner = getattr(method, "__self__", None)
        namespace = getattr(owner, "namespace", None)
        name = f"self.{namespace}.{method.__name__}" if namespace else f"self.{method.__name__}"
        self.bind_call(inspect.signature(method), name, args, kwargs)


def _runtime_min_max(op):
    def reduce(builder: Interpreter, *values):
        if len(values) == 1 and isinstance(values[0], (list, tuple)):
            values = tuple(values[0])
        if not values:
            raise builder.error(f"{op}() needs at least one value")
        result = values[0]
        for value in values[1:]:
            if isinstance(result, TensorValue) or isinstance(value, TensorValue):
                result = elementwise.binary(builder, op, result, value)
            elif not isinstance(result, ir.Expr) and not isinstance(value, ir.Expr):
                result = (min if op == "min" else max)(result, value)
            else:
                result = builder.scalar_binary(op, result, value)
        return result

    return reduce


def _runtime_cdiv(builder: Interpreter, a, b):
    return builder.scalar_binary("cdiv", a, b)


def _runtime_convert(dtype):
    return lambda builder, value: builder.to_expr(value, dtype)


def _runtime_abs(builder: Interpreter, value):
    if isinstance(value, TensorValue):
        raise builder.error(f"abs() takes a scalar, got {describe(value)}; for a tensor write "
                            f"self.where({value.name} < 0.0, -{value.name}, {value.name})")
    value = builder.widened(value)
    return ir.Select(builder.scalar_binary("<", value, 0), ir.Unary("-", value), value)


def cdiv(a, b):
    """Ceiling division ``(a + b - 1) // b`` of non-negative integers; works on compile-time and runtime values."""
    return -(-a // b)


_RUNTIME_BUILTINS = {
    min: _runtime_min_max("min"), max: _runtime_min_max("max"), cdiv: _runtime_cdiv,
    int: _runtime_convert(int32), float: _runtime_convert(float32), bool: _runtime_convert(boolean),
    abs: _runtime_abs,
}


def _register_tensor(value) -> bool:
    """Whether ``value`` is a register tensor (what a helper's parameter borrows from its caller)."""
    return isinstance(value, TensorValue) and value.kind == ir.REGISTER


def _tensors_in(value, label: str):
    """(label, tensor) for ``value`` if it is a tensor, and for each tensor in it if it is a list or tuple (nested
    ones too), labelled as indexed (``parts[0]``)."""
    if isinstance(value, TensorValue):
        yield label, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _tensors_in(item, f"{label}[{i}]")


def _same_constant(a, b) -> bool:
    try:
        return type(a) is type(b) and isinstance(a, (int, float, bool, str)) and a == b
    except Exception:
        return False


def _as_load(target: ast.expr) -> ast.expr:
    """The expression that reads an augmented assignment's target."""
    copy = ast.parse(ast.unparse(target), mode="eval").body
    ast.copy_location(copy, target)
    for child in ast.walk(copy):
        child.lineno = target.lineno
        child.col_offset = getattr(target, "col_offset", 0)
    return copy

