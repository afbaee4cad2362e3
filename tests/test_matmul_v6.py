"""examples/matmul_v6.py on the emulator: every schedule against numpy at a ragged shape with blocks walking several
tiles, under random interleavings, through ``warpspec check``; and the planted bugs of tests/kernels/v6_bug_kernels.py,
each with its exact error class, message and line (a skipped tile: the unwritten-output finding of ``warpspec
check`` and the Python API's warning)."""

import re
import runpy
import sys
import warnings
from io import StringIO
from pathlib import Path

import numpy as np
import pytest

from tests.kernels import v6_bug_kernels as bk
import warpspec
# emulator is imported as an autouse fixture
from tests.support.example_checks import emulator, matmul_operands, relative_error  # noqa: F401
from matmul_v6 import MatmulWGMMAV6
from warpspec import CompileError, RaceError, UnwrittenOutputWarning
from warpspec.cli import main
from warpspec.emulator.run import SEED_VARIABLE

M, N, K = 300, 200, 320  # no dimension a multiple of any tile; 5 K-tiles of 64, more than the deepest ring
TOLERANCE = 1e-2  # relative Frobenius error: fp16 inputs and output, fp32 accumulation
V6_FILE = str(Path(__file__).resolve().parents[1] / "examples" / "matmul_v6.py")
BUG_FILE = bk.__file__
COOPERATIVE = dict(variant="cooperative", num_stages=4, block_m=128, block_n=128, epilogue_n=128)
PINGPONG = dict(variant="pingpong", num_stages=4, block_m=128, block_n=128, epilogue_n=128)
CHUNKED = dict(variant="cooperative", num_stages=4, block_m=128, block_n=256, epilogue_n=64)  # 4 chunks per tile
CHUNKED_PAIR = dict(variant="cooperative", num_stages=6, block_m=128, block_n=128, epilogue_n=64)  # 2 per tile
SIZES = [f"m_size={M}", f"n_size={N}", f"k_size={K}", "num_sms=2"]


@pytest.fixture(scope="module")
def operands():
    """A [M, K], B [N, K] in float16 and the float32 reference A @ B^T."""
    return matmul_operands(M, N, K)


def run(kernel, operands, num_sms):
    """C from ``kernel`` on a grid of at most ``num_sms`` blocks; C starts as NaN so unwritten tiles show, and an
    unwritten-output warning is an error."""
    a, b, _ = operands
    c = np.full((M, N), np.nan, dtype=np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnwrittenOutputWarning)
        kernel(M, N, K, a, b, c, num_sms)
    return c


def line_of(path: str, text: str) -> int:
    """The 1-based line of ``path`` holding ``text`` (exactly one must)."""
    found = [n for n, line in enumerate(Path(path).read_text().splitlines(), 1) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


def test_the_schedule_space():
    """Cooperative and ping-pong at the first measured points, and the cooperative points that a chunked epilogue
    (two chunk buffers of 32 KB in all) gives one stage more: at most 12, so tuning stays quick."""
    space = MatmulWGMMAV6().schedules()
    assert len(space) == 11
    assert {s["variant"] for s in space} == {"cooperative", "pingpong"}
    chunked = [tuple(s.values()) for s in space if s["epilogue_n"] < s["block_n"]]
    assert chunked == [("cooperative", 4, 128, 256, 64), ("cooperative", 4, 256, 128, 32),
                       ("cooperative", 6, 128, 128, 64)]
    assert all(s["block_m"] * s["epilogue_n"] * 2 * 2 == 32 * 1024 for s in space if s["epilogue_n"] < s["block_n"])


@pytest.mark.parametrize("schedule", [pytest.param(s, id=",".join(f"{k}={v}" for k, v in s.items()))
                                      for s in MatmulWGMMAV6().schedules()])
@pytest.mark.parametrize("num_sms", [1, 2, 132])
def test_every_schedule(schedule, num_sms, operands):
    """One block walking every tile, two blocks sharing them (ping-pong's warpgroups get unequal counts), and one
    tile per block."""
    assert relative_error(run(MatmulWGMMAV6(**schedule), operands, num_sms), operands[2]) < TOLERANCE


@pytest.mark.parametrize("release", ["warpgroup", "thread"])
@pytest.mark.parametrize("schedule", [COOPERATIVE, PINGPONG, CHUNKED], ids=["cooperative", "pingpong", "chunked"])
def test_both_release_forms(schedule, release, operands):
    """One arrival per warpgroup (the default) and one per thread (``release="thread"``, to measure against)."""
    assert relative_error(run(MatmulWGMMAV6(**schedule, release=release), operands, 2), operands[2]) < TOLERANCE


@pytest.mark.parametrize("schedule", [COOPERATIVE, PINGPONG, CHUNKED], ids=["cooperative", "pingpong", "chunked"])
def test_under_random_schedules(schedule, operands, monkeypatch):
    """Random interleavings and early async completions: still no error and the right result."""
    for seed in range(10):
        monkeypatch.setenv(SEED_VARIABLE, str(seed))
        error = relative_error(run(MatmulWGMMAV6(**schedule), operands, 2), operands[2])
        assert error < TOLERANCE, f"seed {seed}: relative error {error}"


@pytest.mark.parametrize("schedule", [COOPERATIVE, PINGPONG], ids=["cooperative", "pingpong"])
def test_rasterization_with_a_short_last_band(schedule):
    """1100 rows are 9 tile rows: one band of GROUP_M = 8 and a last band of one row, which the scheduler walks
    with a shorter period. Three blocks over 18 tiles: every C element written once, right."""
    m, n, k = 1100, 200, 64
    a, b, reference = matmul_operands(m, n, k, seed=2)
    c = np.full((m, n), np.nan, dtype=np.float16)
    MatmulWGMMAV6(**schedule)(m, n, k, a, b, c, 3)
    assert relative_error(c, reference) < TOLERANCE


def test_check_cli_every_schedule_with_seeds(capsys):
    """``warpspec check`` at the ragged shape, two blocks, every schedule, random interleavings."""
    code = main(["check", f"{V6_FILE}:MatmulWGMMAV6", *SIZES, "--all-schedules", "--seeds", "3"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0, lines
    assert len(lines) == 12
    assert all(re.fullmatch(r"ok    variant=\w+ num_stages=\d block_m=\d+ block_n=\d+ epilogue_n=\d+  "
                            r"\(\d+\.\d\d s, 1\+3 runs\)", line) for line in lines[:-1]), lines
    assert lines[-1] == "11 ok (no hazard found, outputs not compared), 0 failed, 0 skipped"


def test_check_cli_pins_a_schedule_by_its_variant_word(capsys):
    """``--schedule variant=pingpong,...``: a word naming one of the tuned words is that string."""
    code = main(["check", f"{V6_FILE}:MatmulWGMMAV6", *SIZES,
                 "--schedule", "variant=pingpong,num_stages=5,block_m=128,block_n=128,epilogue_n=128"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0, lines
    assert re.fullmatch(r"ok    variant=pingpong num_stages=5 block_m=128 block_n=128 epilogue_n=128  "
                        r"\(\d+\.\d\d s, 1\+0 runs\)", lines[0]), lines


@pytest.mark.parametrize("value", ["ping-pong", "2"])
def test_check_cli_refuses_a_word_no_schedule_has(value, capsys):
    """A parameter tuned over words only takes one of them (a number too is refused): a usage error listing
    them."""
    code = main(["check", f"{V6_FILE}:MatmulWGMMAV6", *SIZES,
                 "--schedule", f"variant={value},num_stages=4,block_m=128,block_n=128,epilogue_n=128"])
    assert code == 2
    assert capsys.readouterr().err == (f"warpspec check: error: variant='{value}': expected one of the tuned "
                                       f"values cooperative, pingpong\n")


def test_example_runs_as_a_script(monkeypatch):
    """``python examples/matmul_v6.py`` checks itself at a ragged shape and prints its error, then OK."""
    output = StringIO()
    monkeypatch.setattr(sys, "stdout", output)
    runpy.run_path(V6_FILE, run_name="__main__")
    lines = output.getvalue().splitlines()
    assert lines[0].startswith("emulator: max abs error ")
    assert lines[-1] == "OK"


@pytest.mark.parametrize("schedule", [CHUNKED, dict(variant="pingpong", num_stages=3, block_m=64, block_n=256,
                                                     epilogue_n=256)], ids=["cooperative-chunked", "pingpong"])
def test_nvrtc_builds_without_spills(schedule):
    """NVRTC compiles each variant at 8192x8192 with no spills, no stack and no ptxas advisory (a serialized WGMMA
    pipeline would be one), within the 168 registers per thread that 384 threads leave at launch; the cooperative
    one with its chunked epilogue (a column window of the float16 tile per chunk) and four stages."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import parse_ptxas_log
    from warpspec.runtime import kernel_for

    built = compile_kernel(kernel_for(MatmulWGMMAV6(**schedule), {"n_size": 8192, "k_size": 8192}))
    (report,) = parse_ptxas_log(built.module.log).values()
    assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == (0, 0, 0, ())
    assert 0 < report.registers <= 168


def test_the_chunked_epilogue_stores_as_the_whole_tile_does():
    """The column window of each chunk's store_shared folds at compile time: the chunked build stores the same
    128 float16 values per thread as the whole-tile one (as 64 column pairs, one 32-bit store each), with no
    predicated shared store."""
    from warpspec.cuda import sass
    from warpspec.cuda.launch import compile_kernel
    from warpspec.runtime import kernel_for

    whole = dict(CHUNKED, num_stages=3, epilogue_n=256)
    stores = {}
    for name, schedule in [("chunked", CHUNKED), ("whole", whole)]:
        kernel = kernel_for(MatmulWGMMAV6(**schedule), {"n_size": 8192, "k_size": 8192})
        listing = sass.disassemble(compile_kernel(kernel).module.cubin)
        stores[name] = re.findall(r"(@!?U?P\w+\s+)?STS", listing)
    assert len(stores["chunked"]) == len(stores["whole"]) == 64
    assert not any(stores["chunked"])


@pytest.mark.gpu
@pytest.mark.parametrize("schedule", [pytest.param(s, id=",".join(f"{k}={v}" for k, v in s.items()))
                                      for s in MatmulWGMMAV6().schedules()])
def test_every_schedule_on_the_gpu(schedule):
    """Against torch at ragged shapes, with few blocks (each walks many tiles) and one block per SM."""
    import torch

    for (m, n, k), num_sms in [((300, 200, 320), 2), ((1000, 392, 1016), 3), ((2048, 2048, 512), 132)]:
        generator = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=generator)
        b = torch.randn(n, k, device="cuda", dtype=torch.float16, generator=generator)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
        with warpspec.use_backend("cuda"):
            MatmulWGMMAV6(**schedule)(m, n, k, a, b, c, num_sms)
        torch.cuda.synchronize()
        assert not torch.isnan(c).any(), ((m, n, k), num_sms, "some outputs were never written")
        reference = a.double() @ b.double().T
        error = (torch.linalg.norm(c.double() - reference) / torch.linalg.norm(reference)).item()
        assert error < TOLERANCE, ((m, n, k), num_sms, error)


# ------------------------------------------------------------------------------------------------ planted bugs


def caught(kernel, operands, num_sms):
    with pytest.raises(warpspec.KernelError) as info:
        run(kernel, operands, num_sms)
    return info.value


def test_a_repeated_tile_is_a_cross_block_race(operands):
    """Three blocks stepping by two: block 2's tiles 2 and 4 are blocks 0's too. The second block's TMA store into
    the same C elements is the race, at the epilogue's store line."""
    error = caught(bk.SchedulerRepeatsTiles(**COOPERATIVE), operands, 3)
    assert type(error) is RaceError
    store = f"{V6_FILE}:{line_of(V6_FILE, 'self.tma.shared_to_global(')}"
    assert error.location == f"{V6_FILE}:{line_of(V6_FILE, 'self.epilogue(acc, sc[0]')} -> " \
                             f"MatmulWGMMAV6.epilogue at {store}"
    assert ("tma.shared_to_global in block (2, 0, 0) writes gc[256, 0] (argument 'c_ptr'), which block (0, 0, 0) "
            "also wrote (tma.shared_to_global of gc") in str(error)


SKIPPED = (f"{V6_FILE}:{line_of(V6_FILE, 'gc = self.global_view(')}: c_ptr: 8800 elements of view gc [300, 200] "
           f"were never written by any block; the first is gc[256, 0]")


def test_a_skipped_tile_leaves_its_output_unwritten(operands):
    """Two blocks stepping by three skip tiles 2 and 5: no instruction misbehaves, so the run raises nothing, but
    it warns of the unwritten elements, naming c_ptr, the view and the first of them (44 rows x 200 columns);
    the comparison with the reference finds exactly those tiles unwritten (C starts as NaN)."""
    a, b, _ = operands
    c = np.full((M, N), np.nan, dtype=np.float16)
    with pytest.warns(UnwrittenOutputWarning) as caught_warnings:
        bk.SchedulerSkipsTiles(**COOPERATIVE)(M, N, K, a, b, c, 2)
    assert [str(w.message) for w in caught_warnings] == [SKIPPED]
    assert caught_warnings[0].filename == __file__  # the warning points at the call
    # docs/emulator.md quotes this finding, with the path from the repository root
    root = str(Path(V6_FILE).parents[1]) + "/"
    assert SKIPPED.replace(root, "") in (Path(root) / "docs" / "emulator.md").read_text()
    unwritten = np.zeros((M, N), dtype=bool)
    unwritten[256:300, 0:128] = True  # tile 2: the third tile row of the first column band
    unwritten[256:300, 128:200] = True  # tile 5: the third tile row of the second band
    np.testing.assert_array_equal(np.isnan(c), unwritten)
    written = ~unwritten
    assert relative_error(np.where(written, c, 0), np.where(written, operands[2], 0)) < TOLERANCE


def test_a_profiled_call_warns_at_the_call_too(operands):
    """Inside ``warpspec.profile()`` the emulator run takes the session's path; the warning still names the
    caller's line."""
    a, b, _ = operands
    c = np.full((M, N), np.nan, dtype=np.float16)
    with warpspec.profile(), pytest.warns(UnwrittenOutputWarning) as caught_warnings:
        assert bk.SchedulerSkipsTiles(**COOPERATIVE)(M, N, K, a, b, c, 2) is None
    assert [(str(w.message), w.filename) for w in caught_warnings] == [(SKIPPED, __file__)]


def test_check_fails_a_skipped_tile(capsys):
    """``warpspec check`` reports the unwritten elements as a FAIL line; ``--allow-partial-writes`` accepts them."""
    target = f"{BUG_FILE}:SchedulerSkipsTiles"
    code = main(["check", target, *SIZES])
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    label = "variant=cooperative num_stages=4 block_m=128 block_n=128 epilogue_n=128"
    assert lines[:2] == [f"FAIL  {label}  unwritten output: {SKIPPED}", "0 ok (no hazard found, outputs not compared), 1 failed, 0 skipped"]
    assert lines[3:] == [f"first failure: {label} (the deterministic run):", f"unwritten output: {SKIPPED}",
                         "every element of a view the kernel writes through should be written by some block (a tile "
                         "scheduler that skips tiles leaves them unwritten); pass --allow-partial-writes if the "
                         "kernel writes only part of it by design"]
    assert main(["check", target, *SIZES, "--allow-partial-writes"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(f"ok    {label}  (")


def test_an_output_element_of_several_shadow_units():
    """C passed over a buffer that another argument overlaps at a 2-byte offset: the shadow counts 2-byte units,
    two per float32 element, and an element is unwritten when its units are (504 elements, not 1008 units)."""
    from tests.kernels import foundation_kernels as fk

    raw = np.zeros(4 * 512 + 8, np.uint8)
    out = raw[:4 * 512].view(np.float32)
    x = np.frombuffer(raw.data, dtype=np.float32, count=512, offset=2)
    with pytest.warns(UnwrittenOutputWarning) as caught_warnings:
        fk.PartialStores()(2, x, out)  # writes out[0:8] only
    (warning,) = caught_warnings
    assert str(warning.message).endswith(": out_ptr: 504 elements of view out [512] were never written by any "
                                         "block; the first is out[8]")


@pytest.mark.parametrize("schedule, num_sms, inlined_at", [
    (COOPERATIVE, 2, "self.epilogue(acc, sc[0]"),
    (PINGPONG, 1, "self.epilogue(acc, sc, gc"),
], ids=["cooperative", "pingpong"])
def test_an_epilogue_reusing_its_buffer_before_the_store_read_it(schedule, num_sms, inlined_at, operands):
    """Without tma.wait_group before store_shared, the next tile's epilogue writes the buffer the previous TMA store
    is still reading: the async proxy's read is tracked until the wait observes it."""
    error = caught(bk.EpilogueReusesBuffer(**schedule), operands, num_sms)
    assert type(error) is RaceError
    assert error.location.endswith(f"{V6_FILE}:{line_of(V6_FILE, inlined_at)} -> EpilogueReusesBuffer.epilogue at "
                                   f"{BUG_FILE}:{bk.marker_line('reuse-store')}")
    assert str(error).startswith(f"{error.location}: store_shared writes sc[0, 0] while an asynchronous read of it "
                                 f"(a wgmma or a TMA store) is still in flight")


@pytest.mark.parametrize("schedule", [CHUNKED, CHUNKED_PAIR], ids=["four-chunks", "two-chunks"])
def test_a_chunk_buffer_rewritten_before_its_store_read_it(schedule, operands):
    """``tma.wait_group(2)`` with two chunk buffers lets the store that last read a buffer stay in flight when the
    next chunk is written there. With two chunks per tile that store is the previous tile's: it has long finished
    in the emulator's schedule, but wait_group(2) does not say so, and only what the program knows counts."""
    error = caught(bk.ChunkWaitTooLoose(**schedule), operands, 2)
    assert type(error) is RaceError
    assert error.location.endswith(f"ChunkWaitTooLoose.epilogue at {BUG_FILE}:{bk.marker_line('loose-chunk-store')}")
    assert str(error).startswith(f"{error.location}: store_shared writes sc[0, 0] while an asynchronous read of it "
                                 f"(a wgmma or a TMA store) is still in flight")


def test_a_chunk_outside_the_tile_is_a_compile_error(operands):
    error = pytest.raises(CompileError, run, bk.ChunkOutsideTile(**CHUNKED), operands, 2).value
    assert str(error) == (f"{V6_FILE}:{line_of(V6_FILE, 'self.epilogue(acc, sc[0]')} -> ChunkOutsideTile.epilogue at "
                          f"{BUG_FILE}:{bk.marker_line('outside-chunk')}: store_shared: sc holds 64 columns, so "
                          f"column=224 takes columns [224, 288) of acc_float16, which has 256")


def test_an_epilogue_without_the_proxy_fence(operands):
    error = caught(bk.EpilogueWithoutFence(**COOPERATIVE), operands, 2)
    assert type(error) is RaceError
    assert error.location.endswith(f"EpilogueWithoutFence.epilogue at {BUG_FILE}:{bk.marker_line('unfenced-store')}")
    assert "tma.shared_to_global reads sc[0, 0] through the async proxy after ordinary stores to it with no " \
           "fence_proxy_async() in between" in str(error)


def test_an_epilogue_without_the_sync_before_its_store(operands):
    """The storing thread is warpgroup 0's; warpgroup 1's rows of the buffer are not ordered before its read."""
    error = caught(bk.EpilogueWithoutSync(**COOPERATIVE), operands, 2)
    assert type(error) is RaceError
    assert error.location.endswith(f"EpilogueWithoutSync.epilogue at {BUG_FILE}:{bk.marker_line('unsynced-store')}")
    assert str(error).startswith(f"{error.location}: tma.shared_to_global touches sc[0, 0], which threads 128-255 "
                                 f"wrote without a barrier wait or sync ordering it before this access")


REFILL = (f"{V6_FILE}:{line_of(V6_FILE, 'self.produce(pipe, ga, gb')} -> MatmulWGMMAV6.produce at "
          f"{V6_FILE}:{line_of(V6_FILE, 'self.tma.global_to_shared(src=ga')}")


@pytest.mark.parametrize("bug, schedule", [
    (bk.ReleaseBeforeWait, COOPERATIVE),
    (bk.ReleaseBeforeWait, PINGPONG),
    (bk.ReleaseOnceForBothWarpgroups, COOPERATIVE),
], ids=["before-wait-cooperative", "before-wait-pingpong", "once-for-both-warpgroups"])
def test_a_stage_released_while_a_warpgroup_may_still_read_it(bug, schedule, operands):
    """Each warpgroup's one arrival before its wgmma.wait_group, or one arrival for both warpgroups after only the
    arriving thread's warpgroup waited: the producer refills the stage while WGMMAs still read it. The second needs
    the emulator to run each warpgroup of a WGMMA group as its own partition (each waits for its own WGMMAs)."""
    error = caught(bug(**schedule), operands, 2)
    assert type(error) is RaceError
    assert error.location == REFILL
    assert str(error).startswith(f"{REFILL}: tma.global_to_shared writes sa[0] while an asynchronous read of it (a "
                                 f"wgmma or a TMA store) is still in flight")


def test_pingpong_without_its_ordering_barrier(operands):
    """Warpgroup 1's first wait is a lap ahead of a "full" barrier no load has completed yet: its parity passes at
    once and its WGMMA reads a stage still being filled."""
    error = caught(bk.PingPongWithoutOrder(**PINGPONG), operands, 1)
    assert type(error) is RaceError
    frames = error.location.split(" -> ")
    assert frames[1] == f"PingPongWithoutOrder.consume_pingpong at {BUG_FILE}:{bk.marker_line('unordered-mainloop')}"
    assert frames[2] == f"MatmulWGMMAV6.mainloop at {V6_FILE}:{line_of(V6_FILE, 'self.wgmma.mma(')}"
    assert "wgmma.mma operand a reads sa[1], which holds elements that no completed write has filled" in str(error)


def test_pingpong_knows_the_phases_the_other_warpgroup_saw(operands):
    """Ping-pong's warpgroup 0 waits on a "full" barrier two phases after its own last wait (warpgroup 1 consumed
    the phase between); the ordering barrier orders that wait after warpgroup 1's, so the wait is not ambiguous
    and the emulator accepts it. With one block walking six tiles, every stage is passed over this way."""
    assert relative_error(run(MatmulWGMMAV6(**PINGPONG), operands, 1), operands[2]) < TOLERANCE
