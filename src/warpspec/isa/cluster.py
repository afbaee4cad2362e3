"""Thread-block clusters: the cluster barrier (PTX ``barrier.cluster``).

The blocks of a cluster (``self.attrs.cluster_blocks``) run at the same time on one GPC and can reach each other's
shared memory: a block signals another's mbarrier with ``self.mbarrier.arrive(barrier, cta=rank)``
(``warpspec.isa.mbarrier``), and a TMA load can write one tile into several blocks with ``multicast=[ranks]``
(``warpspec.isa.tma``). ``self.cluster_rank`` (PTX ``%cluster_ctarank``) is the block's rank in its cluster. This
module holds the cluster barrier that orders the blocks: its statement, language method and emulation. The CUDA
emission is ``warpspec.cuda.sm90.cluster``; how the emulator runs a cluster is ``warpspec.emulator.cluster``.
"""

from __future__ import annotations

from dataclasses import dataclass

from warpspec.isa.base import LanguageObject, language_call
from warpspec.isa.contracts import BuildContext, EmulationMachine, EmulationTask, Steps
from warpspec.isa.registry import declare_timeline, emulates
from warpspec.isa.timeline_facts import NOT_SHOWN, STATEMENT
from warpspec.ir import nodes as ir

# ------------------------------------------------------------------------------------------------------- IR


@dataclass(frozen=True, eq=False)
class ClusterSync(ir.Stmt):
    """Barrier over every thread of every block of the cluster, with release/acquire semantics at cluster scope:
    what any thread did before it (mbarrier inits, arrivals, shared-memory writes) is visible to every thread of
    the cluster after it."""

    def text(self, f) -> str:
        return "cluster_sync()"


# ------------------------------------------------------------------------------------------------ language


class Cluster(LanguageObject):
    """The cluster barrier, reached on ``self``."""

    @language_call
    def cluster_sync(self) -> None:
        """Barrier over all threads of all blocks of the cluster (all of a block's threads: call it outside thread
        groups). Needed after ``mbarrier.alloc`` before another block signals this block's barriers (a remote
        arrive, a multicast copy), and before the kernel ends while another block may still signal them or write
        this block's shared memory. Without clusters it orders the block's threads like ``self.sync()``.
        PTX: ``barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;``"""
        b = self.b
        if b.in_thread_group():
            raise b.error("self.cluster_sync() must be executed by every thread of the block: call it outside "
                          "thread groups and single_thread")
        b.block_threads()
        b.emit(ClusterSync(b.loc))


def cluster_size(b: BuildContext) -> int:
    """How many blocks the kernel's cluster holds, as ``self.attrs.cluster_blocks`` says so far."""
    x, y, z = b.kernel_attribute("cluster_blocks")
    return x * y * z


def check_rank(b: BuildContext, rank: int, what: str) -> None:
    """A CompileError naming ``what`` unless ``rank`` is a rank of the kernel's cluster."""
    size = cluster_size(b)
    if not 0 <= rank < size:
        raise b.error(f"{what}: cluster rank {rank} is outside the cluster of {size} block(s) (ranks 0-{size - 1}; "
                      f"self.attrs.cluster_blocks sets the cluster shape, before this line)")


# ----------------------------------------------------------------------------------------------- emulation


@emulates(ClusterSync)
def _cluster_sync(machine: EmulationMachine, task: EmulationTask, s: ClusterSync) -> Steps | None:
    cluster = machine.cluster
    return machine.rendezvous(task, len(cluster.tasks), cluster.barrier,
                              "in cluster_sync() (barrier.cluster over every block of the cluster)")


# ---------------------------------------------------------------------------------------------------------- timeline
# What each statement costs the CPU timing model and how timelines show it (``isa.timeline_facts``).
declare_timeline(ClusterSync, STATEMENT, NOT_SHOWN)
