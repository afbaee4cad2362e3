"""sm_90a emission of the fence family (``warpspec.isa.fence``)."""

from __future__ import annotations

from warpspec.cuda.contracts import CodeGenerator
from warpspec.isa.fence import FenceProxyAsync
from warpspec.isa.registry import emits
from warpspec.target import SM90A

TARGET = SM90A.name


@emits(FenceProxyAsync, TARGET)
def _emit_FenceProxyAsync(gen: CodeGenerator, s: FenceProxyAsync) -> None:
    gen.line('asm volatile("fence.proxy.async.shared::cta;" ::: "memory");')
