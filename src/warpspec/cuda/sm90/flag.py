"""sm_90a emission of the flag family (``warpspec.isa.flag``): a GPU-scope release store and an acquire spin on an
int32 element of a global view (debug builds bound the spin as they bound barrier waits)."""

from __future__ import annotations

from warpspec.cuda.contracts import CodeGenerator
from warpspec.isa.flag import FlagAdd, FlagSignal, FlagWait
from warpspec.isa.registry import emits
from warpspec.target import SM90A

TARGET = SM90A.name


def _address(gen: CodeGenerator, s: FlagSignal | FlagAdd | FlagWait) -> str:
    """The flag element's global address, as a u64 C++ expression."""
    view = gen.tensor_name(s.flags.decl)
    return f"({view}_base + static_cast<u64>(static_cast<long long>({gen.cexpr(s.index)}) * {view}_stride0 * 4))"


@emits(FlagSignal, TARGET)
def _emit_FlagSignal(gen: CodeGenerator, s: FlagSignal) -> None:
    # The fence makes this thread's writes, and those a barrier ordered before it, visible at GPU scope before the
    # flag: the release pattern CUTLASS's and CUB's inter-block flags use.
    gen.line(f'asm volatile("fence.acq_rel.gpu;\\n st.relaxed.gpu.global.b32 [%0], %1;" :: "l"({_address(gen, s)}), '
             f'"r"(static_cast<int>({gen.cexpr(s.value)})) : "memory");')


@emits(FlagAdd, TARGET)
def _emit_FlagAdd(gen: CodeGenerator, s: FlagAdd) -> None:
    # A release reduction: the thread's writes (and those a barrier ordered before them) are visible at GPU scope
    # before the count moves, as for a signal, without a separate fence.
    gen.line(f'asm volatile("red.release.gpu.global.add.s32 [%0], %1;" :: "l"({_address(gen, s)}), '
             f'"r"(static_cast<int>({gen.cexpr(s.value)})) : "memory");')


@emits(FlagWait, TARGET)
def _emit_FlagWait(gen: CodeGenerator, s: FlagWait) -> None:
    address, value = _address(gen, s), f"static_cast<int>({gen.cexpr(s.value)})"
    if gen.debug:
        site = gen.debug_site(s, s.flags.decl.name, "flag")
        gen.line(f"flag_wait_debug({address}, {value}, {site}u, static_cast<unsigned>({gen.cexpr(s.index)}));")
        return
    gen.line(f"flag_wait({address}, {value});")
