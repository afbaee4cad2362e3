"""Compile CUDA C++ to an sm_90a cubin with NVRTC (default) or nvcc, through a content-addressed disk cache.

The cache lives in ``cache_dir()/cubin``: one file per entry, named by the sha256 of everything that determines
the cubin (source, compiler and its version, options, target). Each entry is written to a temporary file in the
same folder and moved into place with ``os.replace``, which is atomic on POSIX, so a reader sees either no entry
or a complete one even with many processes compiling at once. An entry is used only when it checks out: a
regular file, carrying its own key (an entry of another kernel copied under this name is not this kernel's), a
checksum over key and contents (catching what atomic renames cannot: a truncated file after a crash or power
loss, a file edited by hand) and a cubin that is an ELF file. Anything else is a miss: the kernel is compiled
again and the entry replaced.

``WARPSPEC_CACHE=0`` in the environment (or ``cache=False``) turns the cache off; ``WARPSPEC_CACHE_DIR`` moves it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import shutil
import struct
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from cuda.bindings import nvrtc

from warpspec.errors import CacheFolderError, CompileError
from warpspec.files import ENTRY_SUFFIXES, kind_folder, problem_text, read_regular_file, write_atomically

_CUBIN_KIND = "cubin"

# Entry layout: magic, the entry's key (the raw sha256 its file is named by), cubin length, log length
# (little-endian u64), sha256 of key + cubin + log, then the two blobs. The magic carries the layout's version; a
# new layout gets a new magic, which also changes every key below.
_MAGIC = b"WSCUBIN2"
_HEADER = struct.Struct("<8s32sQQ32s")
#: The largest entry read: cubins of real kernels are a few MB; a file far larger at an entry's name is damage,
#: and is never read into memory.
MAX_ENTRY_BYTES = 256 * 2**20
#: The first bytes of every cubin: cubins are ELF files.
_ELF_MAGIC = b"\x7fELF"

_CACHE_OFF_VALUES = ("0", "false", "off", "no")


@dataclass(frozen=True)
class CompiledModule:
    """A compiled cubin.

    ``log`` is the compiler's output including ``ptxas -v`` (registers, spills, performance advisories; parse it
    with ``warpspec.cuda.sass.parse_ptxas_log``); ``key`` is the cache key (hex sha256); ``from_cache`` tells
    whether the cubin came from the disk cache rather than a fresh compile, ``entry`` the cache entry's path (None
    with the cache off), which a tool that cannot read a cubin from the cache names.
    """

    cubin: bytes
    log: str
    key: str
    from_cache: bool
    entry: pathlib.Path | None = None

    def origin(self) -> str:
        """Where the cubin came from, for messages about a cubin a tool cannot read: the cache entry that held it
        (a forged or damaged entry, to remove), or a fresh compile."""
        if self.from_cache:
            return (f"the cubin was read from the compile cache entry {self.entry}; remove it (warpspec cache clear "
                    f"--cubins) if it was not written by warpspec")
        return "the cubin was compiled just now"


def nvrtc_version() -> tuple[int, int]:
    """The (major, minor) version of the NVRTC library that ``compile_cuda`` uses."""
    result, major, minor = nvrtc.nvrtcVersion()
    _check_nvrtc(result, "nvrtcVersion")
    return major, minor


def cache_dir() -> pathlib.Path:
    """The root of warpspec's disk cache: ``$WARPSPEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/warpspec``, else
    ``~/.cache/warpspec``. Each kind of entry has its own subfolder (compiled kernels are in ``cubin/``)."""
    explicit = os.environ.get("WARPSPEC_CACHE_DIR")
    if explicit:
        return pathlib.Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg).expanduser() if xdg else pathlib.Path.home() / ".cache"
    return base / "warpspec"


def is_cubin(data: bytes) -> bool:
    """Whether ``data`` can be a cubin: an ELF file. Bytes that are not (a damaged cache entry) must never reach
    the driver or cuobjdump."""
    return data[:4] == _ELF_MAGIC


def clear_cache(kind: str | None = None,
                on_error: Callable[[pathlib.Path, OSError], None] | None = None) -> int:
    """Delete the cache entries of one kind (``"cubin"`` or ``"tuning"``, see ``warpspec.files.ENTRY_SUFFIXES``),
    or of every kind when ``kind`` is None, and return the number of entries removed.

    Only entries are removed: regular files directly inside the kind's folder whose names end in the kind's suffix
    (and the temporary files of interrupted writes, not counted). Nothing is followed through a link and nothing
    outside the kind folders is touched, so a cache directory set to a shared folder by mistake loses nothing but
    warpspec's entries. What is not removed is reported to ``on_error(path, error)`` (without ``on_error``, as a
    RuntimeWarning) and does not stop the others: a kind folder that is a symbolic link or cannot be listed, a
    file that cannot be removed, and something under an entry's name that is not a regular file (a directory or a
    link named ``x.cubin``, which warpspec never creates) as a ``warpspec.files.CacheFolderError``.
    """
    report = on_error or _warn_not_removed
    if kind is not None and kind not in ENTRY_SUFFIXES:
        raise ValueError(f"cache kind must be a plain folder name, one of {', '.join(map(repr, ENTRY_SUFFIXES))}, got {kind!r}")
    root = cache_dir()
    if kind is None:
        try:
            with os.scandir(root):
                pass  # a root that cannot be listed is named itself, not as each kind folder in it
        except (FileNotFoundError, NotADirectoryError):
            return 0  # no cache yet
        except OSError as error:
            report(root, error)
            return 0
    removed = 0
    for name in ENTRY_SUFFIXES if kind is None else (kind,):
        try:
            folder = kind_folder(root, name)
            with os.scandir(folder) as listing:
                entries = list(listing)
        except (FileNotFoundError, NotADirectoryError):
            continue  # nothing of this kind cached yet (or the root itself is missing)
        except OSError as error:
            report(root / name, error)
            continue
        for entry in entries:
            removed += _remove_entry(entry, ENTRY_SUFFIXES[name], report)
    return removed


def _remove_entry(entry: os.DirEntry, suffix: str, report: Callable[[pathlib.Path, OSError], None]) -> int:
    """Remove ``entry`` of a kind folder if it is one of warpspec's files there; 1 when it was a cache entry."""
    path = pathlib.Path(entry.path)
    temporary = entry.name.startswith(".") and entry.name.endswith(".tmp")
    if not (temporary or entry.name.endswith(suffix)):
        return 0  # not a name warpspec writes: not ours to remove
    try:
        regular = entry.is_file(follow_symlinks=False)
    except OSError as error:
        report(path, error)
        return 0
    if not regular:
        what = "symbolic link" if entry.is_symlink() else "directory" if entry.is_dir(follow_symlinks=False) else "special file"
        report(path, CacheFolderError(f"{path} is a {what}, not a regular file: warpspec writes only regular files "
                                      f"there, so it leaves this alone; remove it yourself"))
        return 0
    try:
        os.unlink(path)
    except FileNotFoundError:
        return 0  # another process cleared or replaced it first
    except OSError as error:
        report(path, error)
        return 0
    return 0 if temporary else 1


def _warn_not_removed(path: pathlib.Path, error: OSError) -> None:
    warnings.warn(f"warpspec {problem_text('remove', path, error)}", RuntimeWarning, stacklevel=3)


def compile_cuda(
    source: str,
    *,
    options: tuple[str, ...] = (),
    compiler: str = "nvrtc",
    arch: str = "sm_90a",
    cache: bool = True,
) -> CompiledModule:
    """Compile CUDA C++ ``source`` to a cubin for ``arch`` (an ``sm_XX`` target; wgmma and setmaxnreg need the
    ``a`` suffix, as in the default ``sm_90a``).

    ``compiler`` is ``"nvrtc"`` (the pip NVRTC library, no toolkit needed) or ``"nvcc"`` (must be on PATH).
    Both always compile as C++17 with ``ptxas -v``; ``options`` are appended to the command line. Kernels should
    be declared ``extern "C"`` so that their names are not mangled. Raises ``CompileError`` carrying the
    compiler's log when compilation fails.
    """
    if not arch.startswith("sm_"):
        # compute_XX targets make NVRTC emit PTX only; warpspec ships cubins, since PTX from a compiler newer
        # than the driver cannot be JIT-compiled by it.
        raise ValueError(f"arch must be a real target such as 'sm_90a', got {arch!r}")
    if compiler == "nvrtc":
        major, minor = nvrtc_version()
        version = f"nvrtc {major}.{minor}"
        # --no-cache: NVRTC >= 12.9 shares the driver's JIT cache (~/.nv/ComputeCache) when a driver is present,
        # and a hit there returns the cubin without ptxas' -v report, which warpspec needs. Caching is ours.
        args = (f"-arch={arch}", "-std=c++17", "--ptxas-options=-v", "--no-cache", *options)
        build = functools.partial(_compile_nvrtc, args)
    elif compiler == "nvcc":
        nvcc = _find_nvcc()
        version = _nvcc_version(nvcc)
        # -cubin with an explicit -gencode: `-arch=sm_90a -c` would also run a compute_90 pass that rejects wgmma.
        virtual = "compute_" + arch.removeprefix("sm_")
        args = (f"-gencode=arch={virtual},code={arch}", "-cubin", "-std=c++17", "-Xptxas", "-v", *options)
        build = functools.partial(_compile_nvcc, nvcc, args)
    else:
        raise ValueError(f"compiler must be 'nvrtc' or 'nvcc', got {compiler!r}")

    # The full argument list (target and options included) goes into the key, so changing a built-in flag
    # can never return a cubin built with the old one.
    key = _cache_key(source, compiler, version, args)
    use_cache = cache and os.environ.get("WARPSPEC_CACHE", "1").strip().lower() not in _CACHE_OFF_VALUES
    entry_path = cache_dir() / _CUBIN_KIND / f"{key}.cubin"
    if use_cache:
        entry = _read_entry(entry_path, key)
        if entry is not None:
            return CompiledModule(cubin=entry[0], log=entry[1], key=key, from_cache=True, entry=entry_path)
    cubin, log = build(source)
    if use_cache:
        _write_entry(entry_path, key, cubin, log)
    return CompiledModule(cubin=cubin, log=log, key=key, from_cache=False, entry=entry_path if use_cache else None)


def _cache_key(source: str, compiler: str, version: str, args: tuple[str, ...]) -> str:
    # JSON of a list is an unambiguous encoding: no choice of source or options can collide with another split.
    material = json.dumps([_MAGIC.decode(), source, compiler, version, list(args)])
    return hashlib.sha256(material.encode()).hexdigest()


def _read_entry(path: pathlib.Path, key: str) -> tuple[bytes, str] | None:
    """The (cubin, log) stored at ``path`` for ``key``, or None when it is missing, not a regular file, larger than
    ``MAX_ENTRY_BYTES`` (not read), truncated, corrupt, stored for another key or not a cubin."""
    data = read_regular_file(path, MAX_ENTRY_BYTES)
    if data is None or len(data) < _HEADER.size:
        return None
    magic, stored_key, cubin_size, log_size, digest = _HEADER.unpack_from(data)
    payload = data[_HEADER.size :]
    if (magic != _MAGIC or stored_key != bytes.fromhex(key) or len(payload) != cubin_size + log_size
            or hashlib.sha256(stored_key + payload).digest() != digest):
        return None
    cubin = payload[:cubin_size]
    if not is_cubin(cubin):
        return None
    return cubin, payload[cubin_size:].decode("utf-8", errors="replace")


def _write_entry(path: pathlib.Path, key: str, cubin: bytes, log: str) -> None:
    """Store an entry atomically; a cache that cannot be written costs a recompile later, so it only warns."""
    key_bytes = bytes.fromhex(key)
    log_bytes = log.encode("utf-8")
    payload = cubin + log_bytes
    header = _HEADER.pack(_MAGIC, key_bytes, len(cubin), len(log_bytes), hashlib.sha256(key_bytes + payload).digest())
    write_atomically(path, header + payload, "the compile cache entry")


def _check_nvrtc(result, call: str) -> None:
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"{call} failed: {result.name}")


def _compile_nvrtc(args: tuple[str, ...], source: str) -> tuple[bytes, str]:
    result, program = nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], [])
    _check_nvrtc(result, "nvrtcCreateProgram")
    try:
        (result,) = nvrtc.nvrtcCompileProgram(program, len(args), [arg.encode() for arg in args])
        log = _nvrtc_log(program)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC could not compile the kernel ({result.name}; options {' '.join(args)}):\n{log}")
        result, size = nvrtc.nvrtcGetCUBINSize(program)
        _check_nvrtc(result, "nvrtcGetCUBINSize")
        # A mutable buffer: NVIDIA's examples pass b" " * size, but NVRTC then writes into an immutable bytes
        # object, and for size 1 (an empty log) that object is CPython's shared b" ": on the GPU machine this
        # turned every b" " in the process into b"\0" and broke an unrelated import of torch.
        cubin = bytearray(size)
        (result,) = nvrtc.nvrtcGetCUBIN(program, cubin)
        _check_nvrtc(result, "nvrtcGetCUBIN")
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    return bytes(cubin), log


def _nvrtc_log(program) -> str:
    result, size = nvrtc.nvrtcGetProgramLogSize(program)
    _check_nvrtc(result, "nvrtcGetProgramLogSize")
    buffer = bytearray(size)  # mutable, as for the cubin
    (result,) = nvrtc.nvrtcGetProgramLog(program, buffer)
    _check_nvrtc(result, "nvrtcGetProgramLog")
    # The log is a C string: its size includes the terminating NUL.
    return bytes(buffer).rstrip(b"\x00").decode("utf-8", errors="replace").rstrip()


def _find_nvcc() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise CompileError(
            "compiler='nvcc' needs nvcc on PATH and none was found: install the CUDA toolkit and add its bin/ "
            "folder to PATH, or use compiler='nvrtc' (the default, from the pip package nvidia-cuda-nvrtc)"
        )
    return nvcc


@functools.cache
def _nvcc_version(nvcc: str) -> str:
    # The full --version text (release and build) goes into the cache key: two builds of one release can differ.
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout.strip()


def _compile_nvcc(nvcc: str, args: tuple[str, ...], source: str) -> tuple[bytes, str]:
    with tempfile.TemporaryDirectory(prefix="warpspec-nvcc-") as folder:
        source_path = pathlib.Path(folder) / "kernel.cu"
        cubin_path = pathlib.Path(folder) / "kernel.cubin"
        source_path.write_text(source)
        process = subprocess.run([nvcc, *args, "-o", str(cubin_path), str(source_path)], capture_output=True,
                                 text=True)
        log = (process.stdout + process.stderr).strip()
        if process.returncode != 0:
            raise CompileError(f"nvcc could not compile the kernel (exit {process.returncode}; "
                               f"{' '.join(args)}):\n{log}")
        return cubin_path.read_bytes(), log
