"""The CUDA targets the shared generator (``warpspec.cuda.codegen``) can emit for, by target name.

A target's package (``warpspec.cuda.sm90`` for sm_90a) registers its emitters and one ``CudaTarget`` when
imported: what the generator needs from the target beyond the emitters, so that the generator never names a
target. ``cuda_target`` imports the package the first time a kernel asks for its target, as a driver is found by
the device's name.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from warpspec.cuda.contracts import CodeGenerator
from warpspec.errors import CompileError

#: The package that registers each target name's emitters and CudaTarget when imported.
PACKAGES = {"sm90a": "warpspec.cuda.sm90"}


@dataclass(frozen=True)
class CudaTarget:
    """What one target supplies to the generator: the device helpers every kernel source starts with, the C++
    spelling of the special registers the language exposes, and how the kernel's tensor maps are planned and
    passed."""

    name: str
    prelude: str
    #: Added after ``prelude`` in debug builds (the bounded barrier waits' helpers).
    debug_prelude: str
    #: C++ for each ``ir.Special`` whose spelling is the target's (e.g. ``clusterRank``); the CUDA built-ins
    #: (``blockIdx.x``, ...) are the generator's.
    special_registers: dict[str, str]
    #: ``plan(generator)``: the tensor maps the kernel's copies use, by key, each with an ``index`` (its parameter).
    plan_tensor_maps: Callable[[CodeGenerator], dict]
    #: The C++ type of a tensor-map kernel parameter (passed ``const __grid_constant__``).
    tensor_map_type: str


_targets: dict[str, CudaTarget] = {}


def register(target: CudaTarget) -> None:
    """Make ``target`` the one ``cuda_target(target.name)`` returns (called by the target's package)."""
    _targets[target.name] = target


def cuda_target(name: str) -> CudaTarget:
    """The registered target called ``name``, importing its package on first use; a CompileError for a target
    no package provides."""
    if name not in _targets and name in PACKAGES:
        importlib.import_module(PACKAGES[name])
    if name not in _targets:
        raise CompileError(f"the CUDA back end has no target {name!r}; it emits for {', '.join(sorted(PACKAGES))}")
    return _targets[name]
