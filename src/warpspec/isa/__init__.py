"""The instruction families: one module each, holding the user-facing methods (with the threads that execute them
and the PTX they become), their checks, their IR statements and their emulation. docs/architecture.md says how to
add one."""

# wgmma before tma: their end-of-block checks (``registry.at_exit``) run in import order, WGMMA's first.
from warpspec.isa import (  # noqa: F401
    cluster, elementwise, fence, flag, mbarrier, memory, reduction, roles, wgmma, tma)

#: The families in the order ``self`` offers them; a family with a ``namespace`` is ``self.<namespace>``.
FAMILIES = (memory.Memory, roles.Roles, fence.Fences, elementwise.Elementwise, reduction.Reductions,
            mbarrier.Mbarrier, tma.Tma, wgmma.Wgmma, cluster.Cluster, flag.Flags)
