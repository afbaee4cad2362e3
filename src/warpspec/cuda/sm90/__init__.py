"""The CUDA back end's emitters for sm_90a (Hopper), one module per instruction family of ``warpspec.isa``;
importing this package registers them all, the generator's core emitters and the target's ``CudaTarget``
(``warpspec.cuda.targets``: prelude, special registers, tensor maps)."""

from warpspec.cuda import codegen, targets
from warpspec.cuda.sm90 import (  # noqa: F401
    cluster, elementwise, epilogue, fence, flag, mbarrier, memory, prelude, reduction, roles, tma, wgmma)
from warpspec.target import SM90A

#: The target these emitters are registered for.
TARGET = SM90A.name

codegen.register_core_emitters(TARGET)
targets.register(targets.CudaTarget(
    TARGET, prelude.PRELUDE, prelude.DEBUG_PRELUDE, special_registers={"clusterRank": cluster.CLUSTER_RANK},
    plan_tensor_maps=tma.plan_tensor_maps, tensor_map_type="TmaMap"))
