"""The CUDA back end on the CPU: every example compiles for sm_90a, and the machine code has what it should."""

import re

import pytest

from warpspec.cuda import sass
from warpspec.cuda.codegen import generate
from warpspec.cuda.launch import build
from warpspec.runtime import kernel_for

KEY = ["HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "LDL", "STL"]


def _v3(**schedule):
    from matmul_v3 import MatmulWGMMAV3

    return kernel_for(MatmulWGMMAV3(**schedule), {"n_size": 8192, "k_size": 8192})


def test_v3_sass_has_wgmma_tma_and_mbarriers_and_no_local_memory():
    built = build(_v3(num_stages=4, block_m=128, block_n=128, block_k=64))
    counts = sass.count_instructions(sass.disassemble(built.module.cubin), KEY)
    # 4 unrolled stages x 4 k16 steps x 2 m64 blocks; 4 stages x (A + B) loads.
    assert counts["HGMMA"] == 32
    assert counts["UTMALDG"] == 8
    assert counts["SYNCS"] > 0
    assert counts["LDL"] == 0 and counts["STL"] == 0
    report = next(iter(sass.parse_ptxas_log(built.module.log).values()))
    assert report.spill_store_bytes == 0 and report.stack_bytes == 0


def test_unrolled_ring_indices_are_constants():
    """Under self.range(..., unroll=num_stages) the stage and phase-array indices fold to constants."""
    source = generate(_v3(num_stages=3, block_m=128, block_n=64, block_k=64)).source
    main_loop = source[source.index("unrolled copy 0"):source.index("for (int _ = 0")]
    assert re.search(r"producer_phases\[[0-2]\]", main_loop)
    assert not re.search(r"producer_phases\[[a-z_]", main_loop)
    assert "? producer_phases" not in main_loop  # no select chain: every index is known


def test_copy_kernel_sass_has_tma_store():
    from tma_copy import TmaCopy

    built = build(kernel_for(TmaCopy(tile_m=64, tile_n=64), {}))
    counts = sass.count_instructions(sass.disassemble(built.module.cubin), KEY)
    assert counts["UTMASTG"] == 1 and counts["UTMALDG"] == 1
    assert counts["LDL"] == 0 and counts["STL"] == 0


def test_tma_from_a_one_warp_group_is_issued_by_one_elected_lane():
    from matmul_v4 import MatmulWGMMAV4

    source = generate(kernel_for(MatmulWGMMAV4(num_stages=2, block_m=128, block_n=64, block_k=32),
                                 {"n_size": 256, "k_size": 256})).source
    for match in re.finditer(r"tma_load_2d\(dst_", source):
        opening = source.rfind("{", 0, source.rfind("const unsigned dst_", 0, match.start()))
        assert source[:opening].rstrip().endswith("if (elect_one())"), source[opening - 80:match.start()]


@pytest.mark.parametrize("module, name", [("matmul_v1", "MatmulWGMMAV1"), ("matmul_v2", "MatmulWGMMAV2"),
                                          ("matmul_v4", "MatmulWGMMAV4")])
def test_every_example_compiles_for_sm90a(module, name):
    import importlib

    cls = getattr(importlib.import_module(module), name)
    schedule = cls().schedules()[0]
    built = build(kernel_for(cls(**schedule), {"n_size": 256, "k_size": 256}))
    counts = sass.count_instructions(sass.disassemble(built.module.cubin), KEY)
    assert counts["HGMMA"] > 0 and counts["UTMALDG"] > 0
    assert counts["LDL"] == 0 and counts["STL"] == 0
