"""Proxy fences: ordering ordinary shared-memory writes before the async proxy (TMA, WGMMA) reads them.

``self.fence_proxy_async()``, its IR statement and its emulation (the shared-memory shadow state marks ordinary
writes "unfenced" until a fence by their writer). The CUDA emission is ``warpspec.cuda.sm90.fence``.
"""

from __future__ import annotations

from dataclasses import dataclass

from warpspec.isa.base import LanguageObject, language_call
from warpspec.isa.contracts import EmulationMachine, EmulationTask
from warpspec.isa.registry import declare_timeline, emulates
from warpspec.isa.timeline_facts import NOT_SHOWN, STATEMENT
from warpspec.ir import nodes as ir


@dataclass(frozen=True, eq=False)
class FenceProxyAsync(ir.Instruction):
    """Order the executing threads' ordinary shared-memory writes before later async-proxy reads (TMA, WGMMA)."""


class Fences(LanguageObject):
    """Fences reached on ``self``."""

    @language_call
    def fence_proxy_async(self) -> None:
        """Make the executing threads' ordinary shared-memory writes visible to later asynchronous reads (TMA
        stores, WGMMA). Executed by every thread of the group. PTX: ``fence.proxy.async.shared::cta;``"""
        self.b.emit(FenceProxyAsync(self.b.loc, self.b.threads()))


@emulates(FenceProxyAsync)
def _fence_proxy_async(machine: EmulationMachine, task: EmulationTask, s: FenceProxyAsync) -> None:
    for tensor in machine.shared.values():
        tensor.unfenced[tensor.write_task == task.index] = False


# ---------------------------------------------------------------------------------------------------------- timeline
# What each statement costs the CPU timing model and how timelines show it (``isa.timeline_facts``).
declare_timeline(FenceProxyAsync, STATEMENT, NOT_SHOWN)
