"""Features beyond the seed's V3 on both back ends: bf16, f16 accumulators, A from registers, a shared-memory
epilogue with a TMA store, setmaxnreg budgets and register tiles through load_global/store_global.

CPU: the emulator against numpy, and the machine code the CUDA back end generates. GPU (marked): against torch."""

import re

import ml_dtypes
import numpy as np
import pytest

from tests.kernels import feature_kernels as fk
import warpspec
from warpspec.cuda import sass
from warpspec.cuda.launch import compile_kernel
from warpspec.dtypes import bfloat16, round_to
from warpspec.runtime import kernel_for

MATMULS = [fk.MatmulBF16, fk.MatmulF16Accumulator, fk.MatmulRegisterA, fk.MatmulSharedEpilogue,
           fk.MatmulRegisterBudgets, fk.MatmulSwizzle32]
# float16 accumulators round every partial sum to 11 bits; the others accumulate in float32.
TOLERANCE = {fk.MatmulF16Accumulator: 2e-2}


def _schedule(cls):
    return dict(num_stages=2, block_m=128, block_n=64, block_k=64)


def _inputs(cls, m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((n, k))
    if cls is fk.MatmulBF16:
        return round_to(bfloat16, a), round_to(bfloat16, b), ml_dtypes.bfloat16
    return a.astype(np.float16), b.astype(np.float16), np.float16


@pytest.mark.parametrize("cls", MATMULS, ids=lambda c: c.__name__)
def test_emulator_against_numpy(cls):
    m, n, k = 200, 136, 192
    a, b, out_dtype = _inputs(cls, m, n, k)
    c = np.full((m, n), np.nan, dtype=out_dtype)
    with warpspec.use_backend("emulator"):
        cls(**_schedule(cls))(m, n, k, a, b, c)
    reference = a.astype(np.float64) @ b.astype(np.float64).T
    error = np.linalg.norm(c.astype(np.float64) - reference) / np.linalg.norm(reference)
    assert error < TOLERANCE.get(cls, 1e-2)


def test_split_k_reduce_adds_on_the_emulator():
    """Three K parts of every tile added into C (which held ones) with store_global reduce="add": C = 1 + A·Bᵀ,
    ragged in M and N (the accumulator's edge columns added element by element)."""
    m, n, k = 200, 100, 320
    a, b, _ = _inputs(fk.MatmulSplitKReduce, m, n, k)
    c = np.ones((m, n), np.float32)
    with warpspec.use_backend("emulator"):
        fk.MatmulSplitKReduce(splits=3)(m, n, k, a, b, c)
    reference = a.astype(np.float64) @ b.astype(np.float64).T + 1
    np.testing.assert_allclose(c, reference, rtol=1e-5, atol=1e-4)


def test_split_k_reduce_adds_pairs_with_vector_reds():
    """The accumulator's column pairs are added with red.global.add.v2.f32 (REDG.E.ADD.F32x2), the edge columns
    with one red each; no plain global store, no local memory."""
    built = compile_kernel(kernel_for(fk.MatmulSplitKReduce(splits=3), {}))
    text = sass.disassemble(built.module.cubin)
    assert "REDG.E.ADD.F32x2" in text
    counts = sass.count_instructions(text, ["REDG", "STG", "LDL", "STL"])
    assert counts["REDG"] > 0 and counts["STG"] == 0 and counts["LDL"] == 0 and counts["STL"] == 0


def test_register_tiles_on_the_emulator():
    x = np.random.default_rng(1).standard_normal((40, 100)).astype(np.float32)
    out = np.full_like(x, np.nan)
    with warpspec.use_backend("emulator"):
        fk.ScaleRows()(40, 100, x, out)
    np.testing.assert_array_equal(out, x * 2 + 1)


def _machine_code(cls):
    kernel = kernel_for(cls(**_schedule(cls)), {})
    built = compile_kernel(kernel)
    return built, sass.disassemble(built.module.cubin)


@pytest.mark.parametrize("cls", MATMULS, ids=lambda c: c.__name__)
def test_every_feature_compiles_without_local_memory(cls):
    built, text = _machine_code(cls)
    counts = sass.count_instructions(text, ["HGMMA", "UTMALDG", "LDL", "STL"])
    assert counts["HGMMA"] > 0 and counts["UTMALDG"] > 0
    assert counts["LDL"] == 0 and counts["STL"] == 0
    report = next(iter(sass.parse_ptxas_log(built.module.log).values()))
    assert report.spill_store_bytes == 0


def test_float16_accumulators_and_bf16_inputs_use_their_wgmma_forms():
    _, f16 = _machine_code(fk.MatmulF16Accumulator)
    assert "HGMMA.64x64x16.F16" in f16
    _, bf16 = _machine_code(fk.MatmulBF16)
    assert "HGMMA.64x64x16.F32.BF16" in bf16


def test_register_a_uses_the_rs_form():
    built, text = _machine_code(fk.MatmulRegisterA)
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0" in built.generated.source
    assert "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;" in built.generated.source
    # A's fragments are read a packed pair at a time: one 32-bit load per A register, four per m64n64k16 (each
    # thread's 8 halves of a 64 x 16 slice), and no 16-bit load.
    counts = sass.count_instructions(text, ["LDS", "LDS.U16", "HGMMA"])
    assert counts["LDS.U16"] == 0 and counts["LDS"] == 4 * counts["HGMMA"] > 0


def test_shared_epilogue_ends_in_a_tma_store():
    _, text = _machine_code(fk.MatmulSharedEpilogue)
    counts = sass.count_instructions(text, ["UTMASTG", "FENCE"])
    assert counts["UTMASTG"] == 1 and counts["FENCE"] >= 1


def test_register_budgets_become_setmaxnreg():
    built, text = _machine_code(fk.MatmulRegisterBudgets)
    assert "USETMAXREG.DEALLOC" in text and "USETMAXREG.TRY_ALLOC" in text
    report = next(iter(sass.parse_ptxas_log(built.module.log).values()))
    assert not any("C7508" in line for line in report.advisories)  # setmaxnreg was not ignored


# ------------------------------------------------------------------------------------------------------ GPU

@pytest.mark.gpu
@pytest.mark.parametrize("cls", MATMULS, ids=lambda c: c.__name__)
def test_gpu_against_torch(cls):
    torch = pytest.importorskip("torch")
    m, n, k = 300, 200, 264
    dtype = torch.bfloat16 if cls is fk.MatmulBF16 else torch.float16
    a = torch.randn(m, k, device="cuda").to(dtype)
    b = torch.randn(n, k, device="cuda").to(dtype)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    with warpspec.use_backend("cuda"):
        cls(**_schedule(cls))(m, n, k, a, b, c)
    torch.cuda.synchronize()
    reference = a.double() @ b.double().T
    error = ((c.double() - reference).norm() / reference.norm()).item()
    assert error < TOLERANCE.get(cls, 1e-2)


@pytest.mark.gpu
def test_gpu_split_k_reduce_adds():
    torch = pytest.importorskip("torch")
    m, n, k = 300, 200, 264
    a = torch.randn(m, k, device="cuda").half()
    b = torch.randn(n, k, device="cuda").half()
    c = torch.ones(m, n, device="cuda")
    with warpspec.use_backend("cuda"):
        fk.MatmulSplitKReduce(splits=3)(m, n, k, a, b, c)
    torch.cuda.synchronize()
    reference = a.double() @ b.double().T + 1
    assert ((c.double() - reference).abs().max() / reference.abs().max()).item() < 1e-5


@pytest.mark.gpu
def test_gpu_register_tiles():
    torch = pytest.importorskip("torch")
    x = torch.randn(40, 100, device="cuda")
    out = torch.full_like(x, float("nan"))
    with warpspec.use_backend("cuda"):
        fk.ScaleRows()(40, 100, x, out)
    torch.cuda.synchronize()
    assert torch.equal(out, x * 2 + 1)


def test_the_author_can_choose_a_shared_tile_swizzle():
    """A 128x64 fp16 tile takes 128B swizzle by default; swizzle=32 makes TMA and WGMMA use 32-byte rows (its
    results on both back ends are checked with the other MATMULS)."""
    from warpspec.cuda.codegen import generate

    class_source = generate(kernel_for(fk.MatmulSwizzle32(**_schedule(fk.MatmulSwizzle32)), {})).source
    assert "sa: float16[2, 128, 64] at shared +0, 32B swizzle" in class_source
    built, text = _machine_code(fk.MatmulSwizzle32)
    assert sass.count_instructions(text, ["UTMALDG"])["UTMALDG"] == 2 * 2 * 4  # 2 stages x (A, B) x 4 boxes
    assert built.generated.tensor_maps[0].tile.swizzle_bytes == 32


def test_batched_copy_with_3d_tma_on_the_emulator_and_in_sass():
    src = np.random.default_rng(2).standard_normal((3, 100, 136)).astype(np.float16)
    dst = np.full_like(src, np.nan)
    with warpspec.use_backend("emulator"):
        fk.BatchedCopy()(3, 100, 136, src, dst)
    np.testing.assert_array_equal(dst, src)
    built = compile_kernel(kernel_for(fk.BatchedCopy(), {}))
    text = sass.disassemble(built.module.cubin)
    assert "UTMALDG.3D" in text and "UTMASTG.3D" in text


@pytest.mark.gpu
def test_gpu_batched_copy():
    torch = pytest.importorskip("torch")
    src = torch.randn(3, 100, 136, device="cuda").half()
    dst = torch.full_like(src, float("nan"))
    with warpspec.use_backend("cuda"):
        fk.BatchedCopy()(3, 100, 136, src, dst)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)


# ---------------------------------------------------------------------------------------------------- float8

FP8_CASES = [pytest.param(fk.MatmulFP8, ml_dtypes.float8_e4m3fn, ml_dtypes.bfloat16, "E4M3", id="e4m3"),
             pytest.param(fk.MatmulFP8E5M2, ml_dtypes.float8_e5m2, np.float16, "E5M2", id="e5m2")]


class FP8WithMNMajorB(fk.MatmulFP8):
    """B read as stored ([N, K] taken as [K, N], i.e. MN-major), which float8 WGMMA forms cannot read."""

    def consume(self, pipe, sa, sb, acc, k_size):
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            pipe.consumer_acquire()
            self.wgmma.fence()
            self.wgmma.mma(sa[pipe.consumer_stage], sb[pipe.consumer_stage], acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            pipe.consumer_release()
            pipe.consumer_advance()


@pytest.mark.parametrize("cls, in_dtype, out_dtype, _", FP8_CASES)
def test_fp8_on_the_emulator(cls, in_dtype, out_dtype, _):
    m, n, k = 200, 136, 192
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((m, k)).astype(in_dtype), rng.standard_normal((n, k)).astype(in_dtype)
    c = np.full((m, n), np.nan, dtype=out_dtype)
    with warpspec.use_backend("emulator"):
        cls(**_schedule(cls))(m, n, k, a, b, c)
    reference = a.astype(np.float64) @ b.astype(np.float64).T
    # Products of float8 values are exact in float32; the error is the output's rounding (bf16: 2^-9 relative).
    error = np.linalg.norm(c.astype(np.float64) - reference) / np.linalg.norm(reference)
    assert error < 5e-3


@pytest.mark.parametrize("cls, _, __, ptx", FP8_CASES)
def test_fp8_uses_the_k32_forms(cls, _, __, ptx):
    built, text = _machine_code(cls)
    kind = ptx.lower()
    assert f"wgmma.mma_async.sync.aligned.m64n64k32.f32.{kind}.{kind} " in built.generated.source
    assert ", p, 1, 1;" in built.generated.source  # K-major-only forms take no transpose operands
    counts = sass.count_instructions(text, ["QGMMA", "HGMMA", "LDL", "STL"])
    assert f"QGMMA.64x64x32.F32.{ptx}.{ptx}" in text and counts["HGMMA"] == 0
    assert counts["LDL"] == 0 and counts["STL"] == 0


def test_fp8_refuses_mn_major_operands():
    x = np.zeros((128, 64), dtype=ml_dtypes.float8_e4m3fn)
    with pytest.raises(warpspec.CompileError, match="reads K-major operands only") as caught:
        with warpspec.use_backend("emulator"):
            out = np.zeros((128, 64), ml_dtypes.bfloat16)
            FP8WithMNMajorB(**_schedule(FP8WithMNMajorB))(128, 64, 64, x, x[:64], out)
    assert caught.value.location.split(" -> ")[-1].endswith(f"{__file__}:{FP8_MMA_LINE}")


FP8_MMA_LINE = FP8WithMNMajorB.consume.__code__.co_firstlineno + 4


@pytest.mark.gpu
@pytest.mark.parametrize("cls, in_dtype, out_dtype, _", FP8_CASES)
def test_gpu_fp8_against_torch(cls, in_dtype, out_dtype, _):
    torch = pytest.importorskip("torch")
    m, n, k = 300, 200, 256
    fp8 = torch.float8_e4m3fn if cls is fk.MatmulFP8 else torch.float8_e5m2
    out = torch.bfloat16 if cls is fk.MatmulFP8 else torch.float16
    a = torch.randn(m, k, device="cuda").to(fp8)
    b = torch.randn(n, k, device="cuda").to(fp8)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=out)
    with warpspec.use_backend("cuda"):
        cls(**_schedule(cls))(m, n, k, a, b, c)
    torch.cuda.synchronize()
    reference = a.double() @ b.double().T
    assert ((c.double() - reference).norm() / reference.norm()).item() < 5e-3


# ------------------------------------------------------------------------------------- loops with a runtime step

def test_a_grid_stride_loop_on_the_emulator():
    """Two blocks take tiles 0, 2, 4 and 1, 3 of a 5-tile (ragged) array: every row is written once."""
    x = np.random.default_rng(2).standard_normal((70, 64)).astype(np.float32)
    out = np.full_like(x, np.nan)
    with warpspec.use_backend("emulator"):
        fk.GridStrideRows()(70, 2, 1, x, out)
    np.testing.assert_array_equal(out, x + 1)


def test_a_grid_stride_loop_evaluates_its_step_once_and_compiles():
    kernel = kernel_for(fk.GridStrideRows(), {})
    source = compile_kernel(kernel).generated.source
    (header,) = [line.strip() for line in source.splitlines() if line.strip().startswith("for (int tile")]
    assert re.fullmatch(r"for \(int tile = static_cast<int>\(blockIdx\.x\), loop_stop = .+, loop_step = "
                        r"mul_wrap\(static_cast<int>\(gridDim\.x\), step_scale\); tile < loop_stop; "
                        r"tile \+= loop_step\) \{",
                        header), header


def test_a_runtime_step_must_be_positive_when_the_loop_starts():
    x = np.zeros((32, 64), np.float32)
    with pytest.raises(warpspec.KernelError) as caught, warpspec.use_backend("emulator"):
        fk.GridStrideRows()(32, 1, 0, x, np.zeros_like(x))
    assert caught.value.location == f"{fk.__file__}:{marker(fk, 'grid-stride')}"
    assert "self.range step is 0 when the loop starts; it must be positive" in str(caught.value)


def test_a_runtime_step_cannot_be_unrolled():
    with pytest.raises(warpspec.CompileError) as caught, warpspec.use_backend("emulator"):
        fk.UnrolledRuntimeStep()(32, np.zeros((32, 64), np.float32))
    assert caught.value.location == f"{fk.__file__}:{marker(fk, 'unrolled-runtime-step')}"
    assert "self.range with a runtime step cannot be unrolled (unroll=2)" in str(caught.value)


def marker(module, name: str) -> int:
    from tests.support.markers import marker_line

    return marker_line(module.__file__, name)


@pytest.mark.gpu
def test_gpu_grid_stride_loop():
    torch = pytest.importorskip("torch")
    x = torch.randn(70, 64, device="cuda")
    out = torch.full_like(x, float("nan"))
    with warpspec.use_backend("cuda"):
        fk.GridStrideRows()(70, 2, 1, x, out)
    torch.cuda.synchronize()
    assert torch.equal(out, x + 1)
