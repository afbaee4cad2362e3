"""Every module of warpspec.isa that defines a family (a LanguageObject ``self`` offers) or IR statements has its
tests/isa/test_<module>.py, the file a new instruction of that family adds its tests to."""

import importlib
import inspect
import pkgutil
from pathlib import Path

import warpspec.isa
from warpspec.ir import nodes as ir
from warpspec.isa.base import LanguageObject

HERE = Path(__file__).parent


def _defines_a_family_or_statements(module) -> bool:
    own = [value for value in vars(module).values()
           if inspect.isclass(value) and value.__module__ == module.__name__]
    return any(issubclass(value, (LanguageObject, ir.Stmt)) and value is not LanguageObject for value in own)


def test_every_family_module_has_its_test_file():
    modules = [importlib.import_module(f"warpspec.isa.{info.name}")
               for info in pkgutil.iter_modules(warpspec.isa.__path__)]
    families = sorted(m.__name__.rsplit(".", 1)[1] for m in modules if _defines_a_family_or_statements(m))
    assert {f.__module__.rsplit(".", 1)[1] for f in warpspec.isa.FAMILIES} <= set(families)
    missing = [f"tests/isa/test_{name}.py" for name in families if not (HERE / f"test_{name}.py").is_file()]
    assert not missing, f"instruction family modules without their tests: {missing}"
