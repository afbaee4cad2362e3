"""sm_90a emission of the cluster family (``warpspec.isa.cluster``): the cluster barrier, and the block's rank in
its cluster as a C++ expression."""

from __future__ import annotations

from warpspec.cuda.contracts import CodeGenerator
from warpspec.isa.cluster import ClusterSync
from warpspec.isa.registry import emits
from warpspec.target import SM90A

TARGET = SM90A.name

#: C++ for ``self.cluster_rank`` (PTX ``%cluster_ctarank``, through the prelude's helper).
CLUSTER_RANK = "cluster_ctarank()"


@emits(ClusterSync, TARGET)
def _emit_ClusterSync(gen: CodeGenerator, s: ClusterSync) -> None:
    # The .aligned forms: every thread of each warp executes the barrier together (it is called outside thread
    # groups, so whole warps reach it).
    gen.line('asm volatile("barrier.cluster.arrive.release.aligned;\\n barrier.cluster.wait.acquire.aligned;" ::: '
             '"memory");')
