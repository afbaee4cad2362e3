"""Analyses over the IR that both back ends share: register layouts and the shared-memory plan.

``analyse`` runs them once per kernel (the front end calls it after building the IR) and attaches the result as
``kernel.facts``, so the emulator refuses exactly what the CUDA back end would refuse, at the same line.

Two IR → IR transforms live here too: ``unroll`` (``For(unroll=k)`` into guarded copies of its body) and
``constants`` (constant propagation and folding). The CUDA back end runs them before generating code; the emulator
runs the kernel as the front end built it, and both transforms keep its semantics.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warpspec.ir import nodes as ir
from warpspec.passes.layouts import check_element_access, check_stores, infer_layouts, layout_rules
from warpspec.passes.shared_memory import SharedPlan, plan_shared
from warpspec.target import Target


@dataclass(frozen=True)
class KernelFacts:
    """What the passes decided: ``layouts`` (register tensor decl uid → layout), the shared-memory ``plan`` and
    the ``target`` they were decided for."""

    layouts: dict
    shared: SharedPlan
    target: Target


def analyse(kernel: ir.Kernel, target: Target) -> ir.Kernel:
    """``kernel`` with its facts attached; CompileError at the offending line when layouts or shared memory do
    not work out."""
    rules = layout_rules(kernel, target)
    layouts = infer_layouts(rules)
    check_stores(rules, layouts)
    check_element_access(kernel, rules, layouts)
    return replace(kernel, facts=KernelFacts(layouts, plan_shared(kernel, target), target))
