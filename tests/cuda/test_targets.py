"""The shared generator takes its target's specifics from the target's registered ``CudaTarget``."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from warpspec.cuda import codegen
from warpspec.cuda.targets import cuda_target
from warpspec.errors import CompileError

SRC = Path(__file__).resolve().parents[2] / "src"


def _imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` anywhere in ``path`` names, with the names it takes from a
    package as submodules (``from warpspec.cuda import sm90`` gives ``warpspec.cuda.sm90``)."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def test_codegen_imports_no_target_package():
    imported = _imported_modules(Path(codegen.__file__))
    assert "warpspec.cuda.codegen" not in imported  # the walk reads the right file: it imports the registry
    assert "warpspec.cuda.targets" in imported
    assert [m for m in imported if m == "warpspec.cuda.sm90" or m.startswith("warpspec.cuda.sm90.")] == []


def test_sm90a_registers_its_prelude_special_registers_and_tensor_maps():
    from warpspec.cuda import sm90

    target = cuda_target("sm90a")
    assert target.name == sm90.TARGET == "sm90a"
    assert target.prelude is sm90.prelude.PRELUDE and target.debug_prelude is sm90.prelude.DEBUG_PRELUDE
    assert target.special_registers == {"clusterRank": "cluster_ctarank()"}
    assert target.plan_tensor_maps is sm90.tma.plan_tensor_maps
    assert f"struct alignas(64) {target.tensor_map_type} {{" in target.prelude


def test_generating_imports_the_target_package_on_first_use():
    # A fresh process that never imports warpspec.cuda.sm90 itself: the kernel's target name finds it.
    script = ("import sys; from warpspec.cuda.codegen import generate; from warpspec.runtime import kernel_for; "
              "from tma_copy import TmaCopy; assert 'warpspec.cuda.sm90' not in sys.modules; "
              "script = TmaCopy(); script = script.instantiate(script.schedules()[0]); "
              "source = generate(kernel_for(script, {})).source; "
              "assert 'warpspec.cuda.sm90' in sys.modules and 'struct alignas(64) TmaMap' in source; print('ok')")
    examples = SRC.parent / "examples"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=examples,
                            env={"PYTHONPATH": f"{SRC}:{examples}", "PATH": ""}, timeout=120)
    assert result.stdout.strip() == "ok", result.stderr


def test_an_unknown_target_is_a_compile_error_naming_the_known_ones():
    with pytest.raises(CompileError, match=r"no target 'sm100a'; it emits for sm90a"):
        cuda_target("sm100a")
