"""Read what the compiler made of a kernel: its SASS, its resource usage and ptxas' report and advice.

Uses ``cuobjdump`` and ``nvdisasm`` from the pip packages ``nvidia-cuda-cuobjdump`` / ``nvidia-cuda-nvdisasm``
(installed with ``pip install warpspec[sass]``) or from a CUDA toolkit on PATH. Nothing here needs a GPU. Bytes
that are not a cubin, or a tool that fails on them, are a ``CompileError`` carrying the tool's complaint.
"""

from __future__ import annotations

import functools
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass

from warpspec.cuda.compiler import is_cubin
from warpspec.errors import CompileError

_PIP_PACKAGES = {"cuobjdump": "nvidia-cuda-cuobjdump", "nvdisasm": "nvidia-cuda-nvdisasm"}


@dataclass(frozen=True)
class ResourceUsage:
    """One kernel's resources as recorded in the cubin (``cuobjdump -res-usage``).

    ``shared_bytes`` is static shared memory as the loader counts it: on sm_90 it includes the 1 KiB that the
    driver reserves per block (ptxas' ``smem`` figure plus 1024). ``stack_bytes`` is the per-thread stack frame,
    which is where current compilers put register spills and local arrays: a kernel that spills has a non-zero
    stack (ptxas' report tells spills apart from arrays). ``local_bytes`` is local memory outside the stack
    frame (``LOCAL``; 0 in everything observed with CUDA 13). ``constant_bytes`` is the size of constant bank 0
    (kernel parameters and driver data).
    """

    registers: int
    shared_bytes: int
    stack_bytes: int
    local_bytes: int
    constant_bytes: int


@dataclass(frozen=True)
class PtxasReport:
    """One function's lines from ``ptxas -v``: registers, named barriers, static shared memory (``smem``),
    stack frame, spill traffic (bytes stored to / loaded from local memory per thread) and performance
    advisories (the full ``(C75xx)`` lines, e.g. a wgmma pipeline that ptxas had to serialize)."""

    registers: int = 0
    barriers: int = 0
    shared_bytes: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    advisories: tuple[str, ...] = ()


@functools.cache
def tool_path(name: str) -> pathlib.Path:
    """The path of a CUDA binary tool (``"cuobjdump"`` or ``"nvdisasm"``): first the pip package's copy
    (``site-packages/nvidia/*/bin/<name>``, so the wheel's version wins over an older toolkit), else PATH.
    Raises ``FileNotFoundError`` naming the pip package to install."""
    for entry in sys.path:
        for candidate in sorted(pathlib.Path(entry or ".").glob(f"nvidia/*/bin/{name}")):
            if os.access(candidate, os.X_OK):
                return candidate
    found = shutil.which(name)
    if found is not None:
        return pathlib.Path(found)
    remedy = (f"install it with `pip install {_PIP_PACKAGES[name]}` (or `pip install warpspec[sass]`)"
              if name in _PIP_PACKAGES else "install the CUDA toolkit and add its bin/ folder to PATH")
    raise FileNotFoundError(f"{name} was not found in site-packages/nvidia/*/bin or on PATH; {remedy}")


def disassemble(cubin: bytes) -> str:
    """The SASS of every kernel in ``cubin``, as printed by ``cuobjdump -sass``. Raises ``CompileError`` when
    ``cubin`` is not an ELF file or cuobjdump (or the nvdisasm it runs) cannot read it."""
    # cuobjdump delegates the disassembly to nvdisasm, which it looks for on PATH.
    return _cuobjdump(cubin, "-sass", extra_path=tool_path("nvdisasm").parent)


def resource_usage(cubin: bytes) -> dict[str, ResourceUsage]:
    """Per-kernel resource usage of ``cubin`` (``cuobjdump -res-usage``), keyed by kernel name. Raises
    ``CompileError`` when ``cubin`` is not an ELF file or cuobjdump cannot read it."""
    usage: dict[str, ResourceUsage] = {}
    function = None
    for line in _cuobjdump(cubin, "-res-usage").splitlines():
        header = re.match(r"\s*Function (\S+):\s*$", line)
        if header:
            function = header.group(1)
            continue
        if function is None or "REG:" not in line:
            continue
        fields = dict(re.findall(r"([A-Z]+(?:\[\d+\])?):(\d+)", line))
        usage[function] = ResourceUsage(
            registers=int(fields.get("REG", 0)),
            shared_bytes=int(fields.get("SHARED", 0)),
            stack_bytes=int(fields.get("STACK", 0)),
            local_bytes=int(fields.get("LOCAL", 0)),
            constant_bytes=int(fields.get("CONSTANT[0]", 0)),
        )
        function = None
    return usage


def parse_ptxas_log(log: str) -> dict[str, PtxasReport]:
    """Read ``ptxas -v`` output (``CompiledModule.log``) into a report per function, keyed by name.

    An advisory that names its function (``... in function 'k'``) goes to that function; one that names none
    goes to every function of the log, since it came from the same compilation.
    """
    fields: dict[str, dict[str, int]] = {}
    named_advisories: list[tuple[str, str]] = []
    loose_advisories: list[str] = []
    current = None
    for raw in log.splitlines():
        line = raw.strip()
        if re.search(r"\(C\d{4}\)", line):
            target = re.search(r"function '([^']+)'", line)
            if target:
                named_advisories.append((target.group(1), line))
            else:
                loose_advisories.append(line)
            continue
        start = (re.search(r"Compiling entry function '([^']+)'", line)
                 or re.search(r"Function properties for (\S+)", line))
        if start:
            current = start.group(1)
            fields.setdefault(current, {})
            continue
        if current is None:
            continue
        frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if frame:
            fields[current].update(stack_bytes=int(frame.group(1)), spill_store_bytes=int(frame.group(2)),
                                   spill_load_bytes=int(frame.group(3)))
        for key, pattern in (("registers", r"Used (\d+) registers"), ("barriers", r"used (\d+) barriers"),
                             ("shared_bytes", r"(\d+) bytes smem")):
            found = re.search(pattern, line)
            if found:
                fields[current][key] = int(found.group(1))
    reports = {}
    for name, values in fields.items():
        advisories = tuple(text for target, text in named_advisories if target == name) + tuple(loose_advisories)
        reports[name] = PtxasReport(**values, advisories=advisories)
    return reports


# An instruction line of cuobjdump/nvdisasm output: `/*0c40*/  @!UP0 SYNCS.EXCH.64 URZ, [UR6], UR4 ;`
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:@!?U?P(?:T|\d+)\s+)?([^\s;]+)")


def count_instructions(sass: str, mnemonics: Iterable[str]) -> dict[str, int]:
    """Count the instructions in ``sass`` whose opcode is each mnemonic or extends it by dotted modifiers.

    ``"HGMMA"`` counts ``HGMMA.64x128x16.F32.BF16``; ``"SYNCS"`` counts every ``SYNCS.*``; ``"SYNCS.ARRIVE"``
    only the arrives; ``"LDL"`` counts local loads but ``"LD"`` does not count ``LDS`` or ``LDL``. Predicated
    instructions count like any other. Every requested mnemonic is in the result, with 0 if absent.
    """
    wanted = list(dict.fromkeys(mnemonics))
    counts = dict.fromkeys(wanted, 0)
    for line in sass.splitlines():
        match = _INSTRUCTION.match(line)
        if match is None:
            continue
        opcode = match.group(1)
        for mnemonic in wanted:
            if opcode == mnemonic or opcode.startswith(mnemonic + "."):
                counts[mnemonic] += 1
    return counts


def _cuobjdump(cubin: bytes, option: str, extra_path: pathlib.Path | None = None) -> str:
    if not is_cubin(cubin):
        # cuobjdump's own message for such bytes ("does not contain device code") does not say what is wrong.
        raise CompileError(f"the cubin is not an ELF file (it starts with {bytes(cubin[:8])!r}), so it is not "
                           f"a compiler's output")
    cuobjdump = tool_path("cuobjdump")
    environment = dict(os.environ)
    if extra_path is not None:
        environment["PATH"] = f"{extra_path}{os.pathsep}{environment.get('PATH', '')}"
    with tempfile.TemporaryDirectory(prefix="warpspec-sass-") as folder:
        path = pathlib.Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            process = subprocess.run([str(cuobjdump), option, str(path)], capture_output=True, text=True,
                                     env=environment)
        except OSError as error:  # not executable, or removed since it was found
            raise CompileError(f"cuobjdump {option} could not be run ({cuobjdump}): {error}") from None
    if process.returncode != 0:
        raise CompileError(f"cuobjdump {option} could not read the cubin (exit {process.returncode}):\n"
                           f"{process.stderr.strip() or process.stdout.strip()}")
    return process.stdout
