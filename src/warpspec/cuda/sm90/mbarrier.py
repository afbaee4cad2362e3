"""sm_90a emission of the mbarrier family (``warpspec.isa.mbarrier``): init + fence + block barrier, arrive (to
this block's barrier, or through mapa to another block's in the cluster), arrive.expect_tx and the try_wait.parity loop (helpers in ``prelude``; debug builds bound the wait)."""

from __future__ import annotations

from warpspec.cuda.contracts import CodeGenerator
from warpspec.isa.mbarrier import AllocBarriers, MbarrierArrive, MbarrierArriveExpectTx, MbarrierWait
from warpspec.isa.registry import emits
from warpspec.target import SM90A

TARGET = SM90A.name


@emits(AllocBarriers, TARGET)
def _emit_AllocBarriers(gen: CodeGenerator, s: AllocBarriers) -> None:
    offset = gen.barrier_offsets[s.decl.uid]
    gen.line("if (threadIdx.x == 0) {")
    for i, count in enumerate(s.counts):
        gen.line(f"  mbar_init(smem + {offset + 8 * i}u, {count}u);  // {s.decl.name}[{i}]")
    gen.line('  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");')
    gen.line("}")
    gen.line("__syncthreads();")


@emits(MbarrierArrive, TARGET)
def _emit_MbarrierArrive(gen: CodeGenerator, s: MbarrierArrive) -> None:
    if s.cta is None:
        gen.line(f"mbar_arrive({gen.barrier_address(s.barrier)});")
        return
    # The same barrier in block `cta` of the cluster: its shared::cluster address, then a cluster-scope release.
    gen.line(f'asm volatile("{{\\n .reg .b32 remote;\\n mapa.shared::cluster.u32 remote, %0, %1;\\n '
             f'mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\\n}}" :: '
             f'"r"({gen.barrier_address(s.barrier)}), "r"({gen.cexpr(s.cta)}) : "memory");')


@emits(MbarrierArriveExpectTx, TARGET)
def _emit_MbarrierArriveExpectTx(gen: CodeGenerator, s: MbarrierArriveExpectTx) -> None:
    gen.line(f"mbar_arrive_expect_tx({gen.barrier_address(s.barrier)}, {gen.cexpr(s.nbytes)});")


@emits(MbarrierWait, TARGET)
def _emit_MbarrierWait(gen: CodeGenerator, s: MbarrierWait) -> None:
    if gen.debug:  # a bounded wait that reports which barrier of which statement it gave up on
        site = gen.debug_site(s)
        index = gen.cexpr(s.barrier.index[0])
        gen.line(f"mbar_wait_debug({gen.barrier_address(s.barrier)}, {gen.cexpr(s.phase)}, {site}u, "
                 f"static_cast<unsigned>({index}));")
        return
    gen.line(f"mbar_wait({gen.barrier_address(s.barrier)}, {gen.cexpr(s.phase)});")
