"""The CUDA back end's emitters for sm_90a (Hopper), one module per instruction family of ``warpspec.isa``;
importing this package registers them all."""

from warpspec.cuda.sm90 import (  # noqa: F401
    cluster, elementwise, epilogue, fence, flag, mbarrier, memory, prelude, profile, reduction, roles, tma, wgmma)
from warpspec.target import SM90A

#: The target these emitters are registered for.
TARGET = SM90A.name
