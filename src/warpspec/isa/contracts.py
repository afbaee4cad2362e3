"""What an instruction family may use of its hosts: the build context (front end) and the emulator.

A family module is written against these Protocols only, never against the classes that implement them (those live
in higher layers: ``warpspec.frontend.context.KernelContext`` implements ``BuildContext``,
``warpspec.emulator.machine.BlockMachine`` and ``Task`` implement ``EmulationMachine`` and ``EmulationTask``).
``mypy`` checks every family against them (``[tool.mypy]`` in pyproject.toml). The CUDA emitters' contract is
``warpspec.cuda.contracts.CodeGenerator``.

Objects the emulator creates and hands back (a shared-memory region, an mbarrier, a global tile, an event) are
typed ``Any`` here: the family reads them through their own methods, which the emulator defines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from warpspec.dtypes import DType
from warpspec.errors import CompileError
from warpspec.isa.values import TensorValue
from warpspec.ir import nodes as ir
from warpspec.target import Target

#: What an emulation returns: None when the statement is done, or a generator that yields while the task waits
#: (``machine.wait_until``, ``machine.preempt``, ``machine.exec_body``).
Steps = Iterator[Any]

State = TypeVar("State")

# --------------------------------------------------------------------------------------------- the front end


class BuildContext(Protocol):
    """The front end as a family's ``@language_call`` methods see it (``self.b``): where the call stands, argument
    conversions, errors at the kernel line and the IR it emits."""

    @property
    def target(self) -> Target:
        """The Target the kernel is built for."""

    @property
    def loc(self) -> ir.Loc:
        """The kernel line (with its inlining call sites) of the statement being built."""

    @property
    def depth(self) -> int:
        """How many runtime loops and branches enclose the call (0 at the kernel's top level)."""

    @property
    def group(self) -> tuple[int, int, bool]:
        """The innermost thread group as ``(begin, count, single_thread)``; the whole block outside any group."""

    def in_thread_group(self) -> bool:
        """Whether the call is inside a thread group or single_thread (not executed by the whole block)."""

    def enter_thread_group(self, begin: int, count: int, single: bool) -> AbstractContextManager[None]:
        """``with b.enter_thread_group(...)``: statements built inside run on threads ``[begin, begin + count)``
        (one of them when ``single``), and the names bound inside are the group's own."""

    def block_threads(self) -> int:
        """Threads per block (``self.attrs.warps`` times 32); a CompileError when the kernel has not set it yet."""

    def threads(self) -> tuple[int, int]:
        """``(begin, count)`` of the threads that execute an instruction emitted here: 1 inside single_thread."""

    def claim_named_barrier(self, begin: int, count: int) -> int:
        """Record that thread group ``[begin, begin + count)`` syncs with a named barrier; how many distinct groups
        do now."""

    def kernel_attribute(self, name: str) -> Any:
        """``self.attrs.<name>`` of the kernel as set so far (``cluster_blocks``, ``warps``, ``blocks``)."""

    def pointer_dtype(self, value: object) -> DType | None:
        """The element type of the kernel's pointer parameter ``value``; None when ``value`` is not one."""

    def host_value(self, expr: ir.Expr, root: bool = False) -> ir.Expr | str:
        """``expr`` as the host computes it before the launch, or what makes it unknown there."""

    def target_name(self, default: str) -> str:
        """The variable name the value being built is assigned to (``default`` when none), to name tensors."""

    # ------------------------------------------------------------------------------------------ conversions

    def to_expr(self, value: object, dtype: DType | None = None, what: str = "value") -> ir.Expr:
        """A runtime Expr for a Python scalar or an Expr, converted to ``dtype`` when given."""

    def to_integer(self, value: object, dtype: DType, what: str) -> ir.Expr:
        """An integer Expr of ``dtype``; a float is a CompileError naming ``what``, never truncated."""

    def to_index(self, value: object, what: str) -> ir.Expr:
        """An int32 index or offset (see ``to_integer``)."""

    def to_int(self, value: object, what: str) -> int:
        """``value`` as a compile-time int, or a CompileError naming ``what``."""

    def to_tensor(self, value: object, what: str, kinds: tuple[str, ...] | None = None) -> TensorValue:
        """``value`` as a tensor (of one of ``kinds`` when given), or a CompileError naming ``what``."""

    def scalar_for(self, value: object, dtype: DType, what: str) -> ir.Expr:
        """``value`` as a runtime scalar of ``dtype`` for ``what``: a float never silently becomes an integer."""

    def scalar_binary(self, symbol: str, a: object, b: object) -> ir.Expr:
        """The runtime scalar ``a <symbol> b`` with the language's promotion rules."""

    def new_register_tensor(self, name: str, dtype: DType, shape: tuple[int, ...]) -> ir.TensorDecl:
        """The declaration of a register tensor defined by the statement being built."""

    # ------------------------------------------------------------------------------------------- emitting

    def error(self, message: str) -> CompileError:
        """A CompileError at the statement being built (raise it)."""

    def emit(self, stmt: ir.Stmt) -> ir.Stmt:
        """Append ``stmt`` to the block being built."""

    def nested(self, build: Callable[[], None]) -> tuple[ir.Stmt, ...]:
        """Run ``build()`` collecting the statements it emits into a new block."""


# ----------------------------------------------------------------------------------------------- the emulator


class EmulationTask(Protocol):
    """One thread partition ``[begin, end)`` of a block on the emulator, as an emulation sees it."""

    index: int  # its entry in vector clocks, over every task of the cluster
    begin: int
    end: int
    name: str
    env: dict[int, Any]  # runtime values by variable or register tensor uid
    clock: list[int]  # its vector clock
    woken: bool  # set by ``wake()``: an mbarrier phase it waits for completed

    @property
    def size(self) -> int:
        """How many threads the partition holds."""

    def tick(self) -> None:
        """Advance the task's own clock entry after a release."""

    def wake(self) -> None:
        """Let the task, blocked in a wait, continue."""

    def family_state(self, kind: type[State]) -> State:
        """The task's state of one instruction family: an instance of ``kind`` (a dataclass of the family's
        module), created empty on first use."""


class EmulationCluster(Protocol):
    """The blocks of a thread-block cluster running together."""

    tasks: list[Any]  # every block's tasks, by task index
    barrier: dict[str, Any]  # the cluster barrier's rendezvous state

    def peer(self, task: EmulationTask, rank: int, what: str) -> Any:
        """Block ``rank`` of the cluster (its machine), which instruction ``what`` of ``task`` reaches."""

    def remote_barrier(self, task: EmulationTask, rank: int, ref: ir.TensorRef, what: str) -> Any:
        """The mbarrier ``ref`` names in block ``rank``, which instruction ``what`` of ``task`` signals."""

    def multicast(self, rank: int, event: Any) -> None:
        """Record that ``event`` writes into block ``rank``."""


class EmulationMachine(Protocol):
    """One thread block on the emulator: the services an emulation uses."""

    kernel: ir.Kernel
    rank: int  # the block's rank in its cluster
    cluster: EmulationCluster
    shared: dict[int, Any]  # shared tensors by decl uid
    global_memory: Any  # the block's view of global memory (reads, writes and their race checks)

    def ev(self, task: EmulationTask, expr: ir.Expr) -> Any:
        """The value of scalar expression ``expr`` in ``task``."""

    def exec_body(self, task: EmulationTask, body: tuple[ir.Stmt, ...]) -> Steps:
        """Run ``body`` in ``task``."""

    def preempt(self) -> Steps:
        """A point where a seeded run may switch to another task."""

    def wait_until(self, check: Callable[[], bool], text: str, after: Callable[[], None] | None = None) -> Steps:
        """Block the task until ``check()`` holds (``text`` says what it waits for), then run ``after``."""

    def sync(self, task: EmulationTask, begin: int, count: int, text: str | None = None) -> Steps:
        """Barrier over the partitions inside threads ``[begin, begin + count)``."""

    def rendezvous(self, task: EmulationTask, members: int, state: dict[str, Any], text: str) -> Steps:
        """``task`` arrives at barrier ``state`` of ``members`` tasks and waits for the others."""

    def create_barriers(self, task: EmulationTask, decl: ir.TensorDecl, counts: tuple[int, ...]) -> None:
        """The mbarrier array ``decl`` with these arrival counts (created once)."""

    def barrier(self, task: EmulationTask, ref: ir.TensorRef, block: Any = None) -> Any:
        """The one mbarrier ``ref`` names in ``task`` (in this block, or in ``block`` of the cluster)."""

    def arrivals(self, task: EmulationTask, s: ir.Instruction) -> int:
        """How many arrivals instruction ``s`` executed by ``task`` makes."""

    def create_shared(self, decl: ir.TensorDecl) -> None:
        """The shared tensor ``decl`` (created once)."""

    def region(self, task: EmulationTask, ref: ir.TensorRef, block: Any = None) -> Any:
        """The part of a shared tensor ``ref`` names in ``task`` (in this block, or in ``block`` of the cluster)."""

    def next_operation_id(self) -> int:
        """A fresh id for an asynchronous operation."""

    def new_event(self, kind: str, task: EmulationTask, loc: ir.Loc, complete: Callable[[], None], text: str,
                  retire: Callable[[], None] | None = None) -> Any:
        """An asynchronous operation in flight: ``complete()`` applies it, ``retire()`` runs when observed."""

    def register(self, task: EmulationTask, ref: ir.TensorRef, what: str) -> Any:
        """A register tensor's values (a numpy array), checked not to be written by an mma in flight."""

    def define_register(self, task: EmulationTask, decl: ir.TensorDecl, values: Any) -> None:
        """Give register tensor ``decl`` new values."""

    def touch_accumulator(self, task: EmulationTask, decl: ir.TensorDecl, what: str) -> None:
        """A register access: a RaceError while an mma writing ``decl`` is in flight."""

    def row_share(self, task: EmulationTask, threads: tuple[int, int], rows: int) -> tuple[int, int]:
        """The rows of a register tile of ``rows`` rows this partition holds."""

    def global_tile(self, task: EmulationTask, view: ir.TensorRef, offsets: list[int], tile_shape: tuple[int, ...],
                    what: str, rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None) -> Any:
        """The part of global view ``view`` a tile at ``offsets`` (its ``rows`` and ``cols`` only, when given)
        covers, as one access by ``what``."""

    def global_flag(self, task: EmulationTask, view: ir.TensorRef, index: int, what: str) -> Any:
        """Element ``index`` of the 1-D int32 flag view ``view``."""

    def read_global_tile(self, task: EmulationTask, view: ir.TensorRef, offsets: list[int],
                         tile_shape: tuple[int, ...], what: str, rows: tuple[int, int] | None = None) -> Any:
        """A tile of a global view (its ``rows`` only, when given: the others read as zero) read now by ``what``
        (a numpy array)."""

    def write_global_tile(self, task: EmulationTask, view: ir.TensorRef, offsets: list[int], tile: Any, what: str,
                          rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None) -> None:
        """Write ``tile`` (its ``rows`` and ``cols`` only, when given) into a global view now, by ``what``."""

    def describe_tasks(self) -> str:
        """What every partition, barrier and operation in flight is doing (for error reports)."""
