"""The CUDA back end on the CPU: every example compiles for sm_90a, and the machine code has what it should."""

import re

import numpy as np
import pytest

import warpspec
from warpspec import float16, float32, int32

from warpspec.cuda import sass
from warpspec.cuda.codegen import generate
from warpspec.cuda.launch import compile_kernel
from warpspec.runtime import kernel_for

KEY = ["HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "LDL", "STL"]


def _v3(**schedule):
    from matmul_v3 import MatmulWGMMAV3

    return kernel_for(MatmulWGMMAV3(**schedule), {"n_size": 8192, "k_size": 8192})


def test_v3_sass_has_wgmma_tma_and_mbarriers_and_no_local_memory():
    built = compile_kernel(_v3(num_stages=4, block_m=128, block_n=128, block_k=64))
    counts = sass.count_instructions(sass.disassemble(built.module.cubin), KEY)
    # 4 unrolled stages x 4 k16 steps x 2 m64 blocks; 4 stages x (A + B) loads.
    assert counts["HGMMA"] == 32
    assert counts["UTMALDG"] == 8
    assert counts["SYNCS"] > 0
    assert counts["LDL"] == 0 and counts["STL"] == 0
    report = next(iter(sass.parse_ptxas_log(built.module.log).values()))
    assert report.spill_store_bytes == 0 and report.stack_bytes == 0


def test_unrolled_ring_indices_are_constants():
    """Under self.range(..., unroll=num_stages) the stage and phase-array indices fold to constants: copy j of the
    producer's loop uses phase register j, behind the guards of copies 1 and 2."""
    source = generate(_v3(num_stages=3, block_m=128, block_n=64, block_k=64)).source
    # The loop evaluates its stop and step once, as the emulator does.
    header = "for (int offset_k_trip = 0, loop_stop = 8192, loop_step = 192; offset_k_trip < loop_stop; " \
             "offset_k_trip += loop_step)"
    main_loop = source[source.index(header):
                       source.index("for (int _ = 0")]
    assert re.findall(r"producer_phases\[(\w+)\] = ", main_loop) == ["0", "1", "2"]
    assert re.findall(r"if \(\(add_wrap\(offset_k_trip, (\d+)\) < 8192\)\)", main_loop) == ["64", "128"]
    assert "? producer_phases" not in main_loop  # no select chain: every index is known
    # After the loop the stage is not known (the drain loop advances it): a select chain, not local memory.
    drain = source[source.index("for (int _ = 0"):]
    assert "? producer_phases" in drain.split("for (int ", 2)[1]


def test_copy_kernel_sass_has_tma_store():
    from tma_copy import TmaCopy

    built = compile_kernel(kernel_for(TmaCopy(tile_m=64, tile_n=64), {}))
    counts = sass.count_instructions(sass.disassemble(built.module.cubin), KEY)
    assert counts["UTMASTG"] == 1 and counts["UTMALDG"] == 1
    assert counts["LDL"] == 0 and counts["STL"] == 0


def test_tma_from_a_one_warp_group_is_issued_by_one_elected_lane():
    from matmul_v4 import MatmulWGMMAV4

    source = generate(kernel_for(MatmulWGMMAV4(num_stages=2, block_m=128, block_n=64, block_k=32),
                                 {"n_size": 256, "k_size": 256})).source
    lines = [line.strip() for line in source.splitlines()]
    loads = [i for i, line in enumerate(lines) if line.startswith("const unsigned dst_ = ")]
    assert len(loads) == 4  # A and B tiles in each of the 2 unrolled copies
    for i in loads:
        assert lines[i - 1] == "if (elect_one()) {", lines[i - 2:i + 2]
        assert "cp.async.bulk.tensor.2d.shared::cluster.global" in lines[i + 1]


@pytest.mark.parametrize("module, name", [("matmul_v1", "MatmulWGMMAV1"), ("matmul_v2", "MatmulWGMMAV2"),
                                          ("matmul_v4", "MatmulWGMMAV4")])
def test_every_example_compiles_for_sm90a(module, name):
    import importlib

    cls = getattr(importlib.import_module(module), name)
    schedule = cls().schedules()[0]
    built = compile_kernel(kernel_for(cls(**schedule), {"n_size": 256, "k_size": 256}))
    counts = sass.count_instructions(sass.disassemble(built.module.cubin), KEY)
    assert counts["HGMMA"] > 0 and counts["UTMALDG"] > 0
    assert counts["LDL"] == 0 and counts["STL"] == 0


class ScalarsBesideHalves(warpspec.Script):
    """Scalars of every kind combined with a float16 register tile, one 64-row band of ``dst`` each: a float32
    argument, a declared float16 scalar, an int32 argument, constants a half cannot hold (70000) or whose bits
    differ from their value (1.0), and an element read back from a float16 register tensor."""

    def __call__(self, src_ptr: ~float16, dst_ptr: ~float16, s: float32, n: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        src = self.global_view(src_ptr, dtype=float16, shape=[64, 64])
        dst = self.global_view(dst_ptr, dtype=float16, shape=[5 * 64, 64])
        x = self.load_global(src, offsets=[0, 0], shape=[64, 64])
        t: float16 = 1.5
        held = self.register_tensor(dtype=float16, shape=[2], init=0.0)
        held[1] = 2.25
        u: float32 = held[1]
        self.store_global(dst, x * s, offsets=[0, 0])
        self.store_global(dst, x + t, offsets=[64, 0])
        self.store_global(dst, x + n, offsets=[128, 0])
        self.store_global(dst, x * 70000.0 + 1.0, offsets=[192, 0])
        self.store_global(dst, x + u, offsets=[256, 0])


SCALARS_SOURCE = np.full((64, 64), 0.5, np.float16)
#: What each band holds for x = 0.5, s = 3 and n = 5, rounded to half: the emulator's values.
SCALARS_EXPECTED = [1.5, 2.0, 5.5, float(np.float16(35001.0)), 2.75]


def test_scalars_beside_half_registers_are_their_values_as_on_the_emulator():
    """Every scalar reaches the C++ as its value (a float for 16-bit floats), never converted as if it were a
    half's bits: the GPU once computed x * s as x times the half whose bits are 3 (2e-7), x + 1.0 as x + 6e-8, and
    stored a declared float16 scalar 1.5 as the bits 0x0001. The emulator computes with the scalars' values
    (float32 at the operation, so 0.5 · 70000 is 35000, not the inf of a half 70000)."""
    source = generate(kernel_for(ScalarsBesideHalves(), {})).source
    assert "float t = 1.5f;" in source and "unsigned short t" not in source
    assert "static_cast<float>(s)" in source and "static_cast<float>(n)" in source
    assert "70000.0f" in source
    assert not re.search(r"f16_to_f32\(\s*[0-9.]+f\s*\)", source)
    assert not re.search(r"f16_to_f32\(static_cast<unsigned short>\((s|n)\)\)", source)
    dst = np.zeros((5 * 64, 64), np.float16)
    with warpspec.use_backend("emulator"):
        ScalarsBesideHalves()(SCALARS_SOURCE, dst, 3.0, 5)
    for band, value in enumerate(SCALARS_EXPECTED):
        assert np.all(dst[64 * band:64 * (band + 1)] == np.float16(value)), band


@pytest.mark.gpu
def test_gpu_scalars_beside_half_registers_are_their_values():
    """The GPU's result is the emulator's, band by band."""
    torch = pytest.importorskip("torch")
    dst = torch.zeros((5 * 64, 64), device="cuda", dtype=torch.float16)
    with warpspec.use_backend("cuda"):
        ScalarsBesideHalves()(torch.from_numpy(SCALARS_SOURCE).cuda(), dst, 3.0, 5)
    torch.cuda.synchronize()
    got = dst.cpu().numpy()
    for band, value in enumerate(SCALARS_EXPECTED):
        assert np.all(got[64 * band:64 * (band + 1)] == np.float16(value)), band
