"""sm_90a emission of the roles family (``warpspec.isa.roles``): warp-range branches with ``setmaxnreg``,
``elect.sync`` single threads and ``bar.sync`` barriers (named barriers for thread groups)."""

from __future__ import annotations

from warpspec.cuda.contracts import CodeGenerator
from warpspec.isa.roles import SingleThread, Sync, ThreadGroup
from warpspec.isa.registry import emits
from warpspec.target import SM90A

TARGET = SM90A.name


@emits(ThreadGroup, TARGET)
def _emit_ThreadGroup(gen: CodeGenerator, s: ThreadGroup) -> None:
    warp_threads = gen.target.warp_threads
    first, last = s.begin // warp_threads, (s.begin + s.count) // warp_threads
    gen.line(f"if (warp >= {first} && warp < {last}) {{  // threads [{s.begin}, {s.begin + s.count})")
    gen.indent += 1
    if s.max_registers is not None:
        mode = "inc" if s.max_registers > gen.target.entry_registers(gen.kernel.num_threads) else "dec"
        gen.line(f'asm volatile("setmaxnreg.{mode}.sync.aligned.u32 {s.max_registers};\\n" ::: "memory");')
    gen.groups.append((s.begin, s.count))
    gen.emit_block(s.body)
    gen.groups.pop()
    gen.indent -= 1
    gen.line("}")


@emits(SingleThread, TARGET)
def _emit_SingleThread(gen: CodeGenerator, s: SingleThread) -> None:
    if s.count == 32 and s.begin % 32 == 0:
        gen.line("if (elect_one()) {")
    else:
        gen.line(f"if (threadIdx.x == {s.begin}) {{")
    gen.indent += 1
    gen.single_depth += 1
    gen.emit_block(s.body)
    gen.single_depth -= 1
    gen.indent -= 1
    gen.line("}")


@emits(Sync, TARGET)
def _emit_Sync(gen: CodeGenerator, s: Sync) -> None:
    if s.begin == 0 and s.count == gen.kernel.num_threads:
        gen.line("__syncthreads();")
        return
    key = (s.begin, s.count)
    if key not in gen.named_barriers:  # the front end refused more groups than the target has named barriers
        gen.named_barriers[key] = len(gen.named_barriers) + 1
    gen.line(f'asm volatile("bar.sync {gen.named_barriers[key]}, {s.count};" ::: "memory");')
