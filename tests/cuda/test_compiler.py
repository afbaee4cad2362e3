"""warpspec.cuda.compiler: NVRTC/nvcc builds of sm_90a code and the content-addressed cubin cache (no GPU needed)."""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import shutil

import pytest

from warpspec.cuda import compiler
from warpspec.cuda.compiler import (CompiledModule, cache_dir, clear_cache, compile_cuda, nvrtc_version)
from warpspec.cuda.sass import parse_ptxas_log
from warpspec.errors import CompileError

# Header-less sm_90a kernel: a TMA tile load through a __grid_constant__ tensor map, completed on an mbarrier,
# then a wgmma fence. Enough to make ptxas emit UTMALDG, SYNCS.* and WARPGROUP.ARRIVE.
TMA_KERNEL = r"""
struct alignas(64) TmaMap { unsigned long long opaque[16]; };

extern "C" __global__ void __launch_bounds__(128) tma_probe(const __grid_constant__ TmaMap map, float* out,
                                                            int c0, int c1) {
    __shared__ alignas(1024) unsigned char tile[64 * 64 * 2];
    __shared__ alignas(8) unsigned long long bar;
    unsigned bar_addr = (unsigned)__cvta_generic_to_shared(&bar);
    unsigned tile_addr = (unsigned)__cvta_generic_to_shared(tile);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar_addr), "r"(1) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     :: "r"(bar_addr), "r"(64 * 64 * 2) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];"
                     :: "r"(tile_addr), "l"((unsigned long long)&map), "r"(c0), "r"(c1), "r"(bar_addr) : "memory");
    }
    asm volatile("{\n .reg .pred done;\n wait_loop:\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 " @!done bra wait_loop;\n}\n" :: "r"(bar_addr), "r"(0) : "memory");
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    out[threadIdx.x] = (float)tile[threadIdx.x * 2];
}
"""

BROKEN_KERNEL = 'extern "C" __global__ void broken(float* out) { out[0] = undefined_name; }\n'
SMALL_KERNEL = 'extern "C" __global__ void small(float* out) { out[threadIdx.x] = 1.0f; }\n'


@pytest.fixture
def cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """A fresh, enabled cache directory."""
    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("WARPSPEC_CACHE", raising=False)
    return tmp_path / "cache"


def _entries(cache: pathlib.Path) -> list[pathlib.Path]:
    folder = cache / "cubin"
    return sorted(folder.iterdir()) if folder.exists() else []


def test_nvrtc_version_is_cuda_13_or_later():
    major, minor = nvrtc_version()
    assert major >= 13 and minor >= 0


def test_compile_produces_sm90a_cubin_and_ptxas_log(cache):
    module = compile_cuda(TMA_KERNEL)
    assert isinstance(module, CompiledModule)
    assert module.cubin[:4] == b"\x7fELF"
    assert module.from_cache is False
    assert len(module.key) == 64 and int(module.key, 16) >= 0
    assert "Compiling entry function 'tma_probe' for 'sm_90a'" in module.log
    assert "Used " in module.log and " registers" in module.log
    assert [path.name for path in _entries(cache)] == [f"{module.key}.cubin"]


def test_syntax_error_raises_compile_error_with_nvrtc_log(cache):
    with pytest.raises(CompileError) as raised:
        compile_cuda(BROKEN_KERNEL)
    message = str(raised.value)
    assert 'identifier "undefined_name" is undefined' in message
    assert "NVRTC_ERROR_COMPILATION" in message
    assert _entries(cache) == []  # failures are not cached


def test_second_compile_comes_from_cache(cache):
    first = compile_cuda(TMA_KERNEL)
    second = compile_cuda(TMA_KERNEL)
    assert second.from_cache is True
    assert (second.cubin, second.log, second.key) == (first.cubin, first.log, first.key)
    # Any input of the key changes it: here an extra option.
    other = compile_cuda(TMA_KERNEL, options=("-lineinfo",))
    assert other.from_cache is False and other.key != first.key
    assert len(_entries(cache)) == 2


@pytest.mark.parametrize("how", ["environment", "parameter"])
def test_cache_can_be_disabled(cache, monkeypatch, how):
    if how == "environment":
        monkeypatch.setenv("WARPSPEC_CACHE", "0")
    flag = how != "parameter"
    first = compile_cuda(TMA_KERNEL, cache=flag)
    second = compile_cuda(TMA_KERNEL, cache=flag)
    assert first.from_cache is False and second.from_cache is False
    assert first.cubin == second.cubin
    # A repeated build still carries ptxas' report (NVRTC's own driver-side cache would drop it).
    assert "Used " in second.log
    assert _entries(cache) == []


@pytest.mark.parametrize("damage", ["truncate", "flip_byte", "empty", "garbage"])
def test_damaged_cache_entry_is_detected_and_rebuilt(cache, damage):
    first = compile_cuda(TMA_KERNEL)
    (entry,) = _entries(cache)
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "flip_byte":
        entry.write_bytes(data[:-100] + bytes([data[-100] ^ 0xFF]) + data[-99:])
    elif damage == "empty":
        entry.write_bytes(b"")
    else:
        entry.write_bytes(os.urandom(len(data)))
    damaged = entry.read_bytes()
    rebuilt = compile_cuda(TMA_KERNEL)
    assert rebuilt.from_cache is False
    assert rebuilt.cubin == first.cubin
    assert entry.read_bytes() != damaged  # replaced by a fresh entry
    cached = compile_cuda(TMA_KERNEL)
    assert cached.from_cache is True and cached.cubin == first.cubin


def test_an_entry_copied_under_another_key_is_rebuilt_not_served(cache):
    tma = compile_cuda(TMA_KERNEL)
    small = compile_cuda(SMALL_KERNEL)
    entries = cache / "cubin"
    # A complete, valid entry, but of another kernel: its checksum is right for what it holds.
    (entries / f"{small.key}.cubin").write_bytes((entries / f"{tma.key}.cubin").read_bytes())
    again = compile_cuda(SMALL_KERNEL)
    assert again.from_cache is False
    assert again.cubin == small.cubin
    assert parse_ptxas_log(again.log).keys() == {"small"}  # the log is the kernel's own, not tma_probe's
    assert parse_ptxas_log(again.log)["small"].registers == parse_ptxas_log(small.log)["small"].registers
    cached = compile_cuda(SMALL_KERNEL)  # the foreign entry was overwritten by the right one
    assert cached.from_cache is True and cached.cubin == small.cubin


def test_an_entry_that_is_not_a_cubin_is_rebuilt_not_served(cache, monkeypatch):
    # A compiler that returned something other than an ELF file gets a complete entry with a valid checksum.
    with monkeypatch.context() as patch:
        patch.setattr(compiler, "_compile_nvrtc", lambda args, source: (b"\x00garbage, not an ELF file" * 40, ""))
        assert compile_cuda(TMA_KERNEL).cubin.startswith(b"\x00garbage")
    (entry,) = _entries(cache)
    module = compile_cuda(TMA_KERNEL)
    assert module.from_cache is False and module.cubin[:4] == b"\x7fELF"
    assert "Compiling entry function 'tma_probe'" in module.log
    assert compile_cuda(TMA_KERNEL).from_cache is True
    assert _entries(cache) == [entry]


def test_clear_cache_counts_removed_files(cache):
    compile_cuda(TMA_KERNEL)
    compile_cuda(TMA_KERNEL, options=("-lineinfo",))
    assert clear_cache("cubin") == 2
    assert _entries(cache) == []
    assert compile_cuda(TMA_KERNEL).from_cache is False
    (cache / "other").mkdir()
    (cache / "other" / "entry").write_bytes(b"x")
    (cache / "loose-file").write_bytes(b"not ours")
    assert clear_cache() == 1  # the cubin entry: never loose files in the root, nor folders of no known kind
    assert (cache / "loose-file").exists() and (cache / "other" / "entry").exists()
    with pytest.raises(ValueError, match="one of 'cubin', 'tuning'"):
        clear_cache("missing-kind")
    with pytest.raises(ValueError, match="plain folder name"):
        clear_cache("../cubin")


def test_cache_dir_follows_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(tmp_path / "explicit"))
    assert cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("WARPSPEC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "warpspec"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "warpspec"


def _compile_in_child(barrier, results, cache_path: str) -> None:
    os.environ["WARPSPEC_CACHE_DIR"] = cache_path
    barrier.wait()  # start all compiles together so that their cache writes race
    module = compile_cuda(TMA_KERNEL)
    results.put((module.cubin, module.key))


def test_concurrent_processes_get_identical_cubins_and_one_entry(cache):
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(4)
    results = context.Queue()
    workers = [context.Process(target=_compile_in_child, args=(barrier, results, str(cache))) for _ in range(4)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert len({cubin for cubin, _ in outcomes}) == 1
    assert len({key for _, key in outcomes}) == 1
    (entry,) = _entries(cache)  # exactly one file: no leftover temporary files
    assert entry.name == f"{outcomes[0][1]}.cubin"
    again = compile_cuda(TMA_KERNEL)
    assert again.from_cache is True and again.cubin == outcomes[0][0]


def test_nvcc_missing_is_a_clear_error(cache, monkeypatch):
    monkeypatch.setenv("PATH", str(cache / "no-such-bin"))
    with pytest.raises(CompileError, match="nvcc on PATH"):
        compile_cuda(TMA_KERNEL, compiler="nvcc")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_nvcc_builds_the_same_kernel(cache):
    module = compile_cuda(TMA_KERNEL, compiler="nvcc")
    assert module.cubin[:4] == b"\x7fELF"
    assert "Used " in module.log
    assert module.key != compile_cuda(TMA_KERNEL).key
    assert compile_cuda(TMA_KERNEL, compiler="nvcc").from_cache is True
    with pytest.raises(CompileError, match='identifier "undefined_name" is undefined'):
        compile_cuda(BROKEN_KERNEL, compiler="nvcc")


def test_bad_compiler_and_arch_are_rejected(cache):
    with pytest.raises(ValueError, match="'nvrtc' or 'nvcc'"):
        compile_cuda(TMA_KERNEL, compiler="clang")
    with pytest.raises(ValueError, match="real target"):
        compile_cuda(TMA_KERNEL, arch="compute_90a")
