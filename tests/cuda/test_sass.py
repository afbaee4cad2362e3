"""warpspec.cuda.sass: SASS, resource usage and ptxas reports of real sm_90a builds (no GPU needed)."""

from __future__ import annotations

import re

import pytest

from warpspec.cuda import sass
from warpspec.cuda.compiler import compile_cuda

# Header-less sm_90a kernels. `tma_wgmma` loads a tile with TMA through a __grid_constant__ tensor map, waits on an
# mbarrier, fences and issues one wgmma whose accumulator is read before the wait (ptxas has to inject a wait and
# says so with a C75xx advisory). `spills` is forced to spill by -maxrregcount=32.
KERNELS = r"""
struct alignas(64) TmaMap { unsigned long long opaque[16]; };

extern "C" __global__ void __launch_bounds__(128) tma_wgmma(const __grid_constant__ TmaMap map, float* out,
                                                            unsigned long long desc_a, unsigned long long desc_b) {
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
                     :: "r"(tile_addr), "l"((unsigned long long)&map), "r"(0), "r"(0), "r"(bar_addr) : "memory");
    }
    asm volatile("{\n .reg .pred done;\n wait_loop:\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 " @!done bra wait_loop;\n}\n" :: "r"(bar_addr), "r"(0) : "memory");
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, 1, 1, 1, 0, 0;"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(desc_a), "l"(desc_b));
    out[threadIdx.x] = d0 + (float)tile[threadIdx.x * 2];
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    out[threadIdx.x + 128] = d1 + d2 + d3;
}

extern "C" __global__ void spills(float* out, int n) {
    float values[256];
    for (int i = 0; i < 256; ++i) values[i] = out[i * n];
    float sum = 0.f;
    for (int i = 0; i < 256; ++i) sum += values[(i * n) & 255] * values[i];
    out[threadIdx.x] = sum;
}
"""


@pytest.fixture(scope="module")
def built():
    # cache=False: a module-scoped fixture cannot redirect the cache, and tests must not write to ~/.cache.
    return compile_cuda(KERNELS, options=("-maxrregcount=32",), cache=False)


@pytest.fixture(scope="module")
def disassembly(built):
    return sass.disassemble(built.cubin)


def test_tools_come_from_the_pip_packages_or_path():
    for name in ("cuobjdump", "nvdisasm"):
        path = sass.tool_path(name)
        assert path.name == name and path.is_file()


def test_missing_tool_names_the_pip_package(monkeypatch):
    sass.tool_path.cache_clear()
    monkeypatch.setattr("sys.path", [])
    monkeypatch.setenv("PATH", "")
    try:
        with pytest.raises(FileNotFoundError, match=r"pip install nvidia-cuda-cuobjdump"):
            sass.tool_path("cuobjdump")
    finally:
        sass.tool_path.cache_clear()


def test_sass_contains_tma_mbarrier_and_wgmma(disassembly):
    assert "Function : tma_wgmma" in disassembly
    tma_wgmma = disassembly.split("Function : tma_wgmma")[1].split("Function : ")[0]
    counts = sass.count_instructions(tma_wgmma, ["WARPGROUP.ARRIVE", "UTMALDG", "SYNCS", "HGMMA", "LDL", "STL"])
    assert counts["WARPGROUP.ARRIVE"] >= 1  # wgmma.fence.sync.aligned
    assert counts["UTMALDG"] == 1  # the one cp.async.bulk.tensor load
    assert counts["SYNCS"] >= 3  # mbarrier init, arrive.expect_tx, try_wait
    assert counts["HGMMA"] == 1
    assert counts["LDL"] == 0 and counts["STL"] == 0
    assert re.search(r"UTMALDG\.2D\b", tma_wgmma)


def test_resource_usage_reports_registers_and_no_spills(built):
    usage = sass.resource_usage(built.cubin)
    assert set(usage) == {"tma_wgmma", "spills"}
    kernel = usage["tma_wgmma"]
    assert 0 < kernel.registers <= 32
    assert kernel.stack_bytes == 0 and kernel.local_bytes == 0
    report = sass.parse_ptxas_log(built.log)["tma_wgmma"]
    assert report.registers == kernel.registers
    assert report.spill_store_bytes == 0 and report.spill_load_bytes == 0 and report.stack_bytes == 0
    assert report.shared_bytes == 64 * 64 * 2 + 8  # the tile and the mbarrier
    assert kernel.shared_bytes == report.shared_bytes + 1024  # the loader adds the reserved 1 KiB
    assert report.barriers == 1  # __syncthreads
    assert kernel.constant_bytes > 128  # at least the 128-byte tensor map parameter


def test_spills_show_in_report_usage_and_sass(built, disassembly):
    report = sass.parse_ptxas_log(built.log)["spills"]
    assert report.registers == 32
    assert report.spill_store_bytes > 0 and report.spill_load_bytes > 0
    assert sass.resource_usage(built.cubin)["spills"].stack_bytes == report.stack_bytes > 0
    spills = disassembly.split("Function : spills")[1].split("Function : ")[0]
    counts = sass.count_instructions(spills, ["LDL", "STL"])
    assert counts["LDL"] > 0 and counts["STL"] > 0


def test_wgmma_advisory_is_attributed_to_its_kernel(built):
    reports = sass.parse_ptxas_log(built.log)
    assert any(re.search(r"\(C75\d\d\)", line) for line in reports["tma_wgmma"].advisories)
    assert reports["spills"].advisories == ()


PTXAS_LOG = """\
ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to the \
presence of Extern calls in the function 'consumer'.
ptxas info    : (C7508) Potential Performance Loss: a note without a function.
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'producer' for 'sm_90a'
ptxas info    : Function properties for producer
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 2 barriers, 99328 bytes smem
ptxas info    : Compiling entry function 'consumer' for 'sm_90a'
ptxas info    : Function properties for consumer
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers
ptxas info    : Compile time = 3.1 ms
"""


def test_parse_ptxas_log_reads_every_field():
    reports = sass.parse_ptxas_log(PTXAS_LOG)
    assert set(reports) == {"producer", "consumer"}
    producer, consumer = reports["producer"], reports["consumer"]
    assert (producer.registers, producer.barriers, producer.shared_bytes) == (40, 2, 99328)
    assert (producer.stack_bytes, producer.spill_store_bytes, producer.spill_load_bytes) == (16, 8, 4)
    assert (consumer.registers, consumer.barriers, consumer.shared_bytes, consumer.stack_bytes) == (168, 1, 0, 0)
    codes = lambda report: [re.search(r"\(C\d+\)", line).group() for line in report.advisories]  # noqa: E731
    assert codes(consumer) == ["(C7515)", "(C7508)"]
    assert codes(producer) == ["(C7508)"]


SASS_SNIPPET = """\
        /*0080*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;
        /*0090*/              @!UP0 SYNCS.EXCH.64 URZ, [UR6], UR4 ;
        /*00a0*/                   SYNCS.ARRIVE.TRANS64.RED.A1T0 RZ, [UR5], RZ ;
        /*00b0*/               @P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR5], R0 ;
        /*00c0*/                   LDS.U8 R0, [R0] ;
        /*00d0*/                   LDL.64 R2, [R1+0x8] ;
        /*00e0*/                   STL [R1], R5 ;
        /*00f0*/                   NOP;
                                                                                   /* 0x000fe20000000000 */
"""


def test_count_instructions_matches_dotted_prefixes():
    counts = sass.count_instructions(SASS_SNIPPET, ["HGMMA", "SYNCS", "SYNCS.ARRIVE", "LD", "LDL", "LDS", "STL",
                                                    "NOP", "UTMALDG"])
    assert counts == {"HGMMA": 1, "SYNCS": 3, "SYNCS.ARRIVE": 1, "LD": 0, "LDL": 1, "LDS": 1, "STL": 1, "NOP": 1,
                      "UTMALDG": 0}
