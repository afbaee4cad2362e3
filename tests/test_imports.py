"""``warpspec.imports.after_import``: a callback run once a module's import completes, whenever it happens."""

import importlib
import sys

from warpspec.imports import after_import


def _module_file(tmp_path, monkeypatch, name: str):
    """A module ``name`` (``VALUE = 1``) importable from ``tmp_path``, not imported yet."""
    (tmp_path / f"{name}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)


def test_the_callback_runs_once_the_module_executed_and_the_loader_is_given_back(tmp_path, monkeypatch):
    _module_file(tmp_path, monkeypatch, "warpspec_probe_later")
    seen = []
    after_import("warpspec_probe_later", lambda: seen.append(sys.modules["warpspec_probe_later"].VALUE))
    assert seen == []
    module = importlib.import_module("warpspec_probe_later")
    assert seen == [1]
    assert type(module.__loader__).__name__ == "SourceFileLoader" and module.__spec__.loader is module.__loader__
    importlib.reload(module)  # a second import runs nothing more
    assert seen == [1]
    sys.modules.pop("warpspec_probe_later")


def test_an_imported_module_runs_the_callback_at_once():
    seen = []
    after_import("sys", lambda: seen.append(True))
    assert seen == [True]


def test_a_failing_callback_leaves_the_import_unharmed(tmp_path, monkeypatch):
    _module_file(tmp_path, monkeypatch, "warpspec_probe_failing")

    def fail():
        raise RuntimeError("registration failed")

    after_import("warpspec_probe_failing", fail)
    assert importlib.import_module("warpspec_probe_failing").VALUE == 1
    sys.modules.pop("warpspec_probe_failing")
