"""What the SASS tools make of bytes that are not a good cubin (a damaged cache entry, a tool that fails): a
CompileError naming the tool and its complaint, and in ``warpspec build`` a failed schedule, never a traceback."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from warpspec.cli import main
from warpspec.cuda import sass
from warpspec.errors import CompileError

COPY = f"{Path(__file__).parents[2] / 'examples' / 'tma_copy.py'}:TmaCopy"


@pytest.mark.parametrize("read", [sass.disassemble, sass.resource_usage])
def test_bytes_that_are_not_an_elf_file_are_refused_before_cuobjdump_runs(read, monkeypatch):
    monkeypatch.setattr(sass.subprocess, "run", lambda *args, **kwargs: pytest.fail(f"{args[0]} was run"))
    with pytest.raises(CompileError, match=r"^the cubin is not an ELF file \(it starts with b'WSCUBIN9'\)"):
        read(b"WSCUBIN9" + bytes(100))


@pytest.mark.parametrize("read, option", [(sass.disassemble, "-sass"), (sass.resource_usage, "-res-usage")])
def test_cuobjdump_failing_on_a_cubin_is_a_compile_error(read, option):
    with pytest.raises(CompileError) as raised:
        read(b"\x7fELF" + b"\x02\x01\x01" + b"damaged" * 20)
    first, *rest = str(raised.value).splitlines()
    assert re.fullmatch(rf"cuobjdump {option} could not read the cubin \(exit \d+\):", first)
    assert "does not contain device code" in "\n".join(rest)  # cuobjdump's own words


def test_warpspec_build_reports_a_failing_cuobjdump_as_the_schedules_fate(tmp_path, monkeypatch, capsys):
    tool = tmp_path / "cuobjdump"
    tool.write_text("#!/bin/sh\necho 'cuobjdump fatal   : the file is damaged' >&2\nexit 1\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(sass, "tool_path", lambda name: tool)
    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(tmp_path / "cache"))
    code = main(["build", COPY, "--schedule", "tile_m=64,tile_n=64"])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[1].split()[:2] == ["failed", "tile_m=64"]
    assert out[1].endswith("cuobjdump -sass could not read the cubin (exit 1):")
    assert out[2] == "cuobjdump fatal   : the file is damaged"
