"""``warpspec.imports.after_import``: a callback run once a module's import completes, whenever it happens."""

import importlib
import sys

from warpspec.imports import after_import


def _module_file(tmp_path, monkeypatch, name: str, body: str = "VALUE = 1\n"):
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)


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
    monkeypatch.delitem(sys.modules, "warpspec_probe_later")


def test_an_imported_module_runs_the_callback_at_once(tmp_path, monkeypatch):
    seen = []
    after_import("sys", lambda: seen.append(True))
    assert seen == [True]


def test_a_failing_callback_leaves_the_import_unharmed(tmp_path, monkeypatch):
    _module_file(tmp_path, monkeypatch, "warpspec_probe_failing")

    def fail():
        raise RuntimeError("registration failed")

    after_import("warpspec_probe_failing", fail)
    assert importlib.import_module("warpspec_probe_failing").VALUE == 1
    monkeypatch.delitem(sys.modules, "warpspec_probe_failing")
