"""Front-end defects from the project's issue, each pinned by a test (kernels in tests/kernels/foundation_kernels.py).

A user's mistake must be a warpspec error at the user's ``file:line`` (for inlined helpers and ``warpspec.Class``
methods such as ``Pipeline``'s: the chain that starts at the kernel body's line), before anything runs where
possible, on both back ends; natural Python must work and give the right result.
"""

import inspect
import os
import re

import ml_dtypes
import numpy as np
import pytest

from tests.kernels import foundation_kernels as fk
import warpspec
from warpspec import BarrierError, CompileError, DeadlockError
from warpspec.cli import main
from warpspec.cuda.codegen import generate
from warpspec.cuda.compiler import compile_cuda
from warpspec.runtime import kernel_for

FILE = os.path.realpath(fk.__file__)
PIPELINE_FILE = os.path.realpath(inspect.getsourcefile(warpspec.Pipeline))


def at(marker: str) -> str:
    """``file:line`` of the foundation_kernels.py line carrying ``marker``."""
    return f"{FILE}:{fk.marker_line(marker)}"


def pipeline_line(text: str) -> str:
    """``file:line`` of the line of warpspec/pipeline.py that contains ``text``."""
    with open(PIPELINE_FILE) as f:
        lines = [number for number, line in enumerate(f, 1) if text in line]
    assert len(lines) == 1, text
    return f"{PIPELINE_FILE}:{lines[0]}"


def raises(error_class, location: str, fragment: str, call, backend: str = "emulator"):
    """Run ``call`` on ``backend``; it must raise exactly ``error_class`` at ``location`` with ``fragment`` in the
    message."""
    with warpspec.use_backend(backend), pytest.raises(error_class) as caught:
        call()
    assert type(caught.value) is error_class
    assert caught.value.location == location
    assert fragment in str(caught.value)
    return caught.value


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """Compiles and `warpspec build` use a cache of their own."""
    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(tmp_path / "cache"))


def kernel_body(source: str) -> str:
    """The generated kernel function, without the prelude of helper functions."""
    return source[source.index('extern "C" __global__'):]


# ------------------------------------------------------------------------------------ 1. arguments of calls


@pytest.mark.parametrize("case, marker, fragment", [
    (0, "wait-without-phase", "self.mbarrier.wait(): missing a required argument: 'phase'; it takes (barrier, phase)"),
    (1, "wait-with-parity", "self.mbarrier.wait() has no parameter 'parity'; it takes (barrier, phase)"),
    (2, "mma-without-d", "self.wgmma.mma(): missing a required argument: 'd'; it takes (a, b, d)"),
    (3, "fence-with-argument", "self.fence_proxy_async(): too many positional arguments; it takes ()"),
    (4, "range-surplus", "self.range(): too many positional arguments; it takes (start, stop, step, unroll)"),
])
def test_a_call_with_a_missing_or_unknown_argument_names_the_call_and_the_argument(case, marker, fragment):
    raises(CompileError, at(marker), fragment, lambda: fk.MisusedCalls()(case))


def test_a_library_method_called_with_a_surplus_argument_names_it_at_the_user_line():
    raises(CompileError, at("pipeline-surplus-argument"),
           "Pipeline.consumer_acquire(): too many positional arguments; it takes ()",
           lambda: fk.PipelineMisuse()(3))


# ------------------------------------------------------------------------------------------- 2. recursion


def test_a_helper_that_calls_itself_is_a_compile_error_at_the_user_line():
    raises(CompileError, f"{at('recursion-entry')} -> SelfCallingHelper.countdown at {at('recursive-call')}",
           "SelfCallingHelper.countdown() calls itself (directly or through other helpers)",
           lambda: fk.SelfCallingHelper()(3))


def test_helpers_that_call_each_other_forever_are_a_compile_error_at_the_user_line():
    error = raises(CompileError, f"{at('ping-entry')} -> MutuallyRecursiveHelpers.ping at {at('ping-calls-pong')}",
                   "calls itself (directly or through other helpers)", lambda: fk.MutuallyRecursiveHelpers()(3))
    assert "repeat at run time with a loop (self.range)" in str(error)


def test_a_recursion_that_ends_at_compile_time_is_unrolled():
    out = np.full(32, np.nan, np.float32)
    with warpspec.use_backend("emulator"):
        fk.CompileTimeRecursion()(4, out)
    np.testing.assert_array_equal(out, np.repeat(np.arange(1, 5, dtype=np.float32), 8))


# ---------------------------------------------------------------------------------------- 3. floats as ints


@pytest.mark.parametrize("case, marker, fragment", [
    (0, "float-tma-offset", "tma.global_to_shared offset must be an integer, got a runtime float32 value"),
    (1, "float-grid", "self.attrs.blocks must be an integer, got a runtime float32 value"),
    (2, "float-tx-bytes", "mbarrier.arrive_and_expect_tx transaction_bytes must be an integer, got 1024.5"),
    (3, "float-phase", "mbarrier.wait phase must be an integer, got 0.5"),
    (4, "float-declared-int", "the value assigned to 'count' (int32) must be an integer, got 2.5"),
    (5, "float-assigned-int", "the value assigned to 'count' (int32) must be an integer, got a runtime float32"),
    (6, "float-register-init", "register_tensor init (uint32) must be an integer, got 1.5"),
    (7, "float-element", "the value stored into phases[...] (uint32) must be an integer, got 0.5"),
    (8, "float-tensor-operand", "the scalar operand of '+' on uint32 tensor phases must be an integer, got 0.5"),
])
def test_a_float_is_never_truncated_into_an_integer_operand(case, marker, fragment):
    error = raises(CompileError, at(marker), fragment,
                   lambda: fk.FloatOperands()(case, 128, np.zeros((128, 128), np.float16)))
    assert "convert it with int(...) or use // for integer division" in str(error)


# ------------------------------------------------------------------------------------ 4. errors in libraries


NO_STAGES = ("assert num_stages >= 1", "a Pipeline needs at least one stage, got num_stages=0")


@pytest.mark.parametrize("case, chain, statement, fragment", [
    (0, ["pipeline-no-stages"], *NO_STAGES),
    (1, ["pipeline-in-group"], "self.full_barriers = self.mbarrier.alloc(",
     "mbarrier.alloc must be called by the whole block, outside thread groups"),
    (2, ["pipeline-helper-call", "PipelineMisuse.make_pipeline", "pipeline-in-helper"], *NO_STAGES),
])
def test_a_compile_error_inside_pipeline_names_the_user_line_first(case, chain, statement, fragment):
    user = " -> ".join([at(chain[0])] + [f"{name} at {at(marker)}" for name, marker in zip(chain[1::2], chain[2::2])])
    library = pipeline_line(statement)
    raises(CompileError, f"{user} -> Pipeline.__init__ at {library}", fragment, lambda: fk.PipelineMisuse()(case))


@pytest.mark.parametrize("case, error_class, user, method, fragment", [
    (0, DeadlockError, "consumer-acquire-deadlock", "consumer_acquire", "deadlock: every unfinished thread partition"),
    (1, DeadlockError, "consume-helper-call", "consumer_acquire", "deadlock: every unfinished thread partition"),
    (2, BarrierError, "release-too-many", "consumer_release", "128 arrival(s) on empty_barriers[0] but only 1"),
])
def test_an_emulator_error_inside_pipeline_names_the_user_line_first(case, error_class, user, method, fragment):
    statement = {"consumer_acquire": "self.mbarrier.wait(self.full_barriers[self.consumer_stage]",
                 "consumer_release": "self.mbarrier.arrive(self.empty_barriers[self.consumer_stage])"}[method]
    helper = f" -> PipelineRunMisuse.consume at {at('helper-consumer-acquire')}" if case == 1 else ""
    location = f"{at(user)}{helper} -> Pipeline.{method} at {pipeline_line(statement)}"
    raises(error_class, location, fragment, lambda: fk.PipelineRunMisuse()(case, 1))


# ------------------------------------------------------------------------------- 5. stores by some holders


PARTIAL_STORES = [
    (lambda: fk.PartialStores()(0, np.ones(512, np.float32), np.zeros(512, np.float32)), "store-from-single-thread",
     "store_global of tile is executed by a single thread (single_thread), but tile is held as blocked over a "
     "thread group by threads [0, 128)"),
    (lambda: fk.PartialStores()(1, np.ones(512, np.float32), np.zeros(512, np.float32)), "store-from-half-the-block",
     "store_global of tile is executed by threads [128, 256), but tile is held as blocked over a thread group by "
     "threads [0, 256)"),
    (lambda: fk.HalfAccumulatorStore()(np.zeros((128, 64), np.float32)), "store-half-accumulator",
     "store_global of acc is executed by threads [0, 128), but acc is held as wgmma accumulator fragments by threads "
     "[0, 256)"),
]


@pytest.mark.parametrize("backend", ["emulator", "cuda"])
@pytest.mark.parametrize("call, marker, fragment", PARTIAL_STORES)
def test_a_store_by_part_of_the_threads_holding_a_tensor_is_refused_before_running(backend, call, marker, fragment):
    raises(CompileError, at(marker), fragment, call, backend)


def test_warpspec_build_refuses_a_store_by_one_of_two_accumulator_warpgroups(capsys):
    code = main(["build", f"{FILE}:HalfAccumulatorStore"])
    assert code == 1
    assert capsys.readouterr().out.splitlines() == [
        f"FAIL  HalfAccumulatorStore  CompileError: {at('store-half-accumulator')}: {PARTIAL_STORES[2][2]}, each "
        f"holding part of it: every one of those threads must execute the store (and no other)"]


def test_a_replicated_tensor_stored_by_one_thread_works_on_both_back_ends():
    out = np.full(512, np.nan, np.float32)
    # The kernel writes out[:8] only, on purpose: the emulator says so (a warning, not an error).
    with warpspec.use_backend("emulator"), pytest.warns(warpspec.UnwrittenOutputWarning,
                                                        match=r"out_ptr: 504 elements of view out \[512\]"):
        fk.PartialStores()(2, np.ones(512, np.float32), out)
    np.testing.assert_array_equal(out[:8], np.full(8, 3.0, np.float32))
    assert np.isnan(out[8:]).all()
    source = generate(kernel_for(fk.PartialStores(), {"case": 2})).source
    single = kernel_body(source).split("if (threadIdx.x == 0) {", 1)[1]
    # The one thread writes all eight elements it holds.
    assert re.findall(r"= static_cast<float>\(small\[(\d+)\]\);", single) == [str(i) for i in range(8)]
    assert compile_cuda(source).cubin[:4] == b"\x7fELF"


# ------------------------------------------------------------------------------------ 6. shared memory


@pytest.mark.parametrize("backend", ["emulator", "cuda"])
@pytest.mark.parametrize("case, marker, name, total", [
    (0, "shared-256k", "whole", 256 * 1024),
    (1, "shared-second-half", "second", 256 * 1024),
    (2, "shared-4g", "huge", 4 * 1024 ** 3),
])
def test_shared_memory_beyond_a_block_is_refused_at_the_line_that_crosses_the_limit(backend, case, marker, name,
                                                                                      total):
    error = raises(CompileError, at(marker), f"shared tensor {name} brings the block's shared memory to {total} bytes",
                   lambda: fk.TooMuchShared()(case), backend)
    assert "at most 231424 fit in a block on sm90a" in str(error)
    assert error.shared_bytes == total


def test_warpspec_build_refuses_a_kernel_whose_shared_memory_does_not_fit_at_the_line(capsys):
    code = main(["build", f"{FILE}:TooMuchShared", "case=1"])
    assert code == 1
    assert capsys.readouterr().out.splitlines() == [
        f"FAIL  TooMuchShared  CompileError: needs 262144 bytes of shared memory (tiles and barriers); a block has at "
        f"most 231424; the shared_tensor at {at('shared-second-half')} crosses it"]


# ------------------------------------------------------------------------------------ 7. natural Python


@pytest.mark.parametrize("case", [0, 1, 2, 3])
def test_the_grid_may_be_computed_through_a_local_variable(case):
    """cdiv(200, 64) = 4 blocks (case 2: cdiv(200, 128) * 2, case 3: cdiv(2 * 200, 128)), each writing
    out[b] = b + 1."""
    out = np.full(8, np.nan, np.float32)
    with warpspec.use_backend("emulator"), pytest.warns(warpspec.UnwrittenOutputWarning,
                                                        match=r"out_ptr: 4 elements of view out \[8\]"):
        fk.GridThroughLocal()(case, 200, out)  # out[4:] is never written, on purpose: the emulator says so
    np.testing.assert_array_equal(out[:4], [1, 2, 3, 4])
    assert np.isnan(out[4:]).all()


@pytest.mark.parametrize("case, marker, fragment", [
    (0, "grid-after-loop", "but this size depends on 'tiles', a runtime variable assigned inside a runtime loop, a "
                           "branch or a thread group"),
    (1, "grid-after-group", "but this size depends on 'tiles', a runtime variable assigned inside a runtime loop"),
    (2, "grid-from-block-index", "but this size depends on 'first_tile', which depends on blockIdx.x"),
    (3, "grid-through-two-locals", "but this size depends on 'last_tile', which depends on blockIdx.x"),
    (4, "grid-from-changed-parameter", "but this size depends on 'm_size', a runtime variable assigned inside a "
                                       "runtime loop"),
])
def test_a_grid_the_host_cannot_compute_names_the_variable(case, marker, fragment):
    error = raises(CompileError, at(marker), fragment, lambda: fk.GridThroughChangingLocal()(case, 200))
    assert "self.attrs.blocks may only use kernel parameters and compile-time values" in str(error)


def test_underscore_takes_tensors_and_scalars_and_a_scalar_name_may_become_a_tensor():
    out = np.full(24, np.nan, np.float32)
    with warpspec.use_backend("emulator"):
        fk.UnpackAndRebind()(3, out)
    np.testing.assert_array_equal(out, np.repeat(np.array([2, 5, 4], np.float32), 8))


# ------------------------------------------------------------------------------------ 8. named barriers


@pytest.mark.parametrize("backend", ["emulator", "cuda"])
def test_more_thread_group_syncs_than_named_barriers_are_refused_at_the_sync(backend):
    raises(CompileError, at("group-sync"), "self.sync() over threads [480, 512) would be the 16th distinct thread "
           "group to sync, but sm90a has 16 named barriers per block and barrier 0 is the whole block's",
           lambda: fk.GroupSyncs()(16), backend)


def test_fifteen_thread_group_syncs_fit_both_back_ends():
    with warpspec.use_backend("emulator"):
        fk.GroupSyncs()(15)
    body = kernel_body(generate(kernel_for(fk.GroupSyncs(), {"groups": 15})).source)
    named = re.findall(r"bar\.sync (\d+), (\d+);", body)
    # One barrier per group; the repeated group reuses barrier 1, the whole block (however spelled) uses 0.
    assert named == [(str(i), "32") for i in range(1, 16)] + [("1", "32")]
    assert body.count("__syncthreads();") == 2
    assert compile_cuda(generate(kernel_for(fk.GroupSyncs(), {"groups": 15})).source).cubin[:4] == b"\x7fELF"


# --------------------------------------------------------------------------------------- 9. float8 casts


def test_a_cast_to_float8_e4m3_converts_with_cvt_satfinite():
    kernel = kernel_for(fk.CastToFloat8(), {})
    source = generate(kernel).source
    conversions = re.findall(r"tile_float8_e4m3\[i\] = (.*); }", kernel_body(source))
    # Every element through the prelude's cvt.rn.satfinite helper, none by a C++ cast of the float's value.
    assert conversions and all(c.startswith("f32_to_e4m3(") and "static_cast<unsigned char>" not in c
                               for c in conversions), conversions
    assert "cvt.rn.satfinite.e4m3x2.f32" in source[:source.index('extern "C" __global__')]
    assert compile_cuda(source).cubin[:4] == b"\x7fELF"


def test_a_cast_to_float8_e4m3_rounds_to_nearest_and_saturates_on_the_emulator():
    x = np.linspace(-600, 600, 512, dtype=np.float32)
    y = np.zeros(512, ml_dtypes.float8_e4m3fn)
    with warpspec.use_backend("emulator"):
        fk.CastToFloat8()(x, y)
    expected = np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(y.view(np.uint8), expected.view(np.uint8))


@pytest.mark.gpu
def test_a_cast_to_float8_e4m3_on_the_gpu_matches_the_emulator_bit_for_bit():
    """The emulator is the specification: the GPU's cvt.rn.satfinite gives the same bits, saturation, ties,
    subnormals, infinities and NaN included."""
    torch = pytest.importorskip("torch")
    x = np.concatenate([np.linspace(-600, 600, 500, dtype=np.float32),
                        np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -10,
                                  17.0, 18.0, 1e-30, -1e-30], dtype=np.float32)])
    expected = np.zeros(512, ml_dtypes.float8_e4m3fn)
    with warpspec.use_backend("emulator"):
        fk.CastToFloat8()(x, expected)
    y = torch.zeros(512, dtype=torch.float8_e4m3fn, device="cuda")
    with warpspec.use_backend("cuda"):
        fk.CastToFloat8()(torch.from_numpy(x).cuda(), y)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(y.view(torch.uint8).cpu().numpy(), expected.view(np.uint8))
