"""What a target's emitters may use of the CUDA code generator.

Every ``@emits(Node, target)`` function of ``warpspec.cuda.<target>`` is ``fn(gen: CodeGenerator, stmt)``: it
writes C++ with inline PTX through the members below, and nothing else of the generator.
``warpspec.cuda.codegen.CodeGenerator`` implements the Protocol; ``mypy`` checks every emitter against it
(``[tool.mypy]`` in pyproject.toml). What the instruction families see of the front end and the emulator is
``warpspec.isa.contracts``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from warpspec.dtypes import DType
from warpspec.errors import CompileError
from warpspec.isa.memory import GlobalView
from warpspec.ir import nodes as ir
from warpspec.passes.shared_memory import SharedPlacement
from warpspec.target import Target


class CodeGenerator(Protocol):
    """The generator of one kernel's CUDA C++, as an emitter sees it."""

    kernel: ir.Kernel
    target: Target
    indent: int  # the nesting level of the lines written next (an emitter opening a C++ block raises it)
    debug: bool  # a debug build: bounded barrier waits that report where they gave up
    quad_stores: bool  # 16-byte global stores of 16-bit accumulator tiles through quad exchanges
    single_depth: int  # > 0 inside single_thread: instructions already run on one thread
    current_loc: ir.Loc | None  # the statement being generated
    reg_layouts: dict[int, Any]  # register tensor uid -> its register layout (warpspec.passes.layouts)
    shared: dict[int, SharedPlacement]  # shared tensor uid -> where it lives and its tile layout
    barrier_offsets: dict[int, int]  # mbarrier array uid -> its byte offset in shared memory
    views: dict[int, GlobalView]  # global view uid -> its statement
    maps: dict[tuple[int, int], Any]  # (view uid, tile uid) -> the tensor map a TMA copy uses
    named_barriers: dict[tuple[int, int], int]  # thread group (begin, count) -> its named barrier id
    groups: list[tuple[int, int]]  # the thread groups open around the statement, innermost last
    declared: set[int]  # register tensors whose arrays are declared

    def line(self, text: str) -> None:
        """Write one line of C++ at the current indent."""

    def error(self, message: str, loc: ir.Loc | None = None) -> CompileError:
        """A CompileError at ``loc``, by default the statement being generated (raise it)."""

    def emit_block(self, body: tuple[ir.Stmt, ...]) -> None:
        """Emit ``body`` inside a C++ block."""

    def cexpr(self, e: ir.Expr) -> str:
        """The C++ of a scalar expression."""

    def name_of(self, var: ir.Var) -> str:
        """The C++ name of a runtime variable."""

    def tensor_name(self, decl: ir.TensorDecl) -> str:
        """The C++ name of a tensor."""

    def element(self, decl: ir.TensorDecl, i: int | str) -> str:
        """C++ reading element register ``i`` of a register tensor (its bit pattern for 16-bit types)."""

    def set_element(self, decl: ir.TensorDecl, i: int | str, value: str) -> str:
        """A C++ statement writing ``value`` into element register ``i``."""

    def declare_registers(self, decl: ir.TensorDecl) -> None:
        """Declare the per-thread array of a register tensor (once)."""

    def row_major(self, indices: Any, shape: tuple[int, ...]) -> int | str:
        """The row-major position of ``indices`` in ``shape``: an int when every index is known, else C++."""

    def element_loop(self, layout: Any, body: Callable[..., None]) -> None:
        """Emit ``body(i, row, col, valid)`` for every element register of ``layout``."""

    def to_storage(self, f32_expr: str, dtype: DType) -> str:
        """C++ converting a float to what a ``dtype`` register holds."""

    def to_f32(self, expr: str, dtype: DType) -> str:
        """C++ converting a value of ``dtype`` to float."""

    def barrier_address(self, ref: ir.TensorRef) -> str:
        """The shared address of the mbarrier ``ref`` names."""

    def tile_address(self, ref: ir.TensorRef, loc: ir.Loc | None) -> str:
        """The shared address of the tile ``ref`` selects."""

    def debug_site(self, stmt: Any, name: str | None = None, kind: str = "mbarrier") -> int:
        """The site number of wait ``stmt`` in a debug build."""
