"""The package's layers import downward only: no module imports one of a higher layer, not even inside a function,
and no two packages of one layer import each other."""

import ast
from pathlib import Path

import warpspec

ROOT = Path(warpspec.__file__).parent

#: Lowest first. A module may import modules of its own package or of lower layers.
LAYERS = [
    ("warpspec.errors", "warpspec.dtypes", "warpspec.environment", "warpspec.imports"),
    ("warpspec.files", "warpspec.target"),
    ("warpspec.ir",),
    ("warpspec.layout",),
    ("warpspec.isa",),
    ("warpspec.passes",),
    ("warpspec.arguments", "warpspec.frontend"),
    ("warpspec.emulator", "warpspec.cuda"),
    ("warpspec.runtime",),
    ("warpspec.timeline",),
    ("warpspec.tune",),
    ("warpspec.script",),
    ("warpspec.pipeline",),
    ("warpspec.torch_ops",),
    ("warpspec.ops",),
    ("warpspec",),
    ("warpspec.cli",),
]


def unit(module: str) -> str:
    """The layer entry a module belongs to: its package (``warpspec.isa.tma`` -> ``warpspec.isa``)."""
    for layer in LAYERS:
        for name in sorted(layer, key=len, reverse=True):
            if name == "warpspec" and module != "warpspec":
                continue
            if module == name or module.startswith(name + "."):
                return name
    raise AssertionError(f"{module} is in no layer; add it to LAYERS")


def rank(name: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if name in layer)


def imports(path: Path, module: str):
    """(imported module, line) for every import in the file, including those inside functions."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                target = candidate if (ROOT.parent / (candidate.replace(".", "/") + ".py")).exists() or \
                    (ROOT.parent / candidate.replace(".", "/")).is_dir() else base
                yield target, node.lineno


def modules():
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield path, ".".join(parts)


def test_no_import_goes_up_a_layer():
    back_edges = []
    for path, module in modules():
        here = unit(module)
        for target, line in imports(path, module):
            if not (target == "warpspec" or target.startswith("warpspec.")):
                continue
            there = unit(target)
            if there == here:
                continue
            if rank(there) >= rank(here):
                back_edges.append(f"{path.relative_to(ROOT.parent)}:{line}: {module} imports {target}")
    assert back_edges == []


def test_every_module_is_in_a_layer():
    for _, module in modules():
        unit(module)


def documented_layers() -> list[tuple[str, ...]]:
    """The layer table at the top of docs/architecture.md, lowest first: a layer per line that does not start with
    a space (its names before the description), continuation lines indented."""
    text = (ROOT.parents[1] / "docs" / "architecture.md").read_text()
    block = text.split("```\n", 2)[1]
    layers = []
    for line in block.splitlines():
        if line and not line.startswith(" "):
            names = line.split("  ", 1)[0].split(", ")
            layers.append(tuple(name if name == "warpspec" else f"warpspec.{name}" for name in names))
    return layers


def test_the_architecture_document_lists_the_layers_this_test_enforces():
    assert [set(layer) for layer in documented_layers()] == [set(layer) for layer in LAYERS]
