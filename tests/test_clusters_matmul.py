"""examples/matmul_v7.py (V6 cooperative in 2-CTA clusters, B multicast): every schedule against numpy on the
emulator at a ragged shape, with one cluster per cluster tile and with persistent clusters walking several,
deterministic and under random interleavings; its sm_90a build at every schedule (multicast loads, remote
arrivals, cluster barriers, no local memory, registers within the block's budget); on a Hopper GPU against
torch."""

import re
from pathlib import Path

import numpy as np
import pytest

import warpspec
# emulator is imported as an autouse fixture
from tests.support.example_checks import emulator, matmul_operands, relative_error  # noqa: F401
from matmul_v7 import CLUSTER, CONSUMER_THREADS, WARPGROUP, MatmulWGMMAV7
from warpspec import CompileError, DeadlockError, RaceError
from warpspec.cli import main
from warpspec.cuda import sass
from warpspec.cuda.launch import compile_kernel
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.runtime import kernel_for

M, N, K = 300, 200, 320  # no multiple of any tile: TMA zero fill, clipped stores, blocks past M
TOLERANCE = 1e-2  # relative Frobenius error: fp16 inputs and output, fp32 accumulation
SCHEDULES = [pytest.param(s, id="-".join(map(str, s.values()))) for s in MatmulWGMMAV7().schedules()]


@pytest.fixture(scope="module")
def operands():
    """A [M, K], B [N, K] in float16 and the float32 reference A @ B^T."""
    return matmul_operands(M, N, K)


def matmul_error(kernel, operands, num_sms=132) -> float:
    """Run ``kernel`` with at most ``num_sms`` blocks and return its relative error."""
    a, b, reference = operands
    c = np.full((M, N), np.nan, dtype=np.float16)  # NaN shows any tile left unwritten
    kernel(M, N, K, a, b, c, num_sms)
    return relative_error(c, reference)


def test_the_space_is_small_and_every_schedule_pairs_blocks_along_m():
    assert len(SCHEDULES) == 5
    kernel = kernel_for(MatmulWGMMAV7(num_stages=4, block_m=128, block_n=128, epilogue_n=128), {"n_size": N, "k_size": K})
    assert kernel.cluster == (CLUSTER, 1, 1)


@pytest.mark.parametrize("num_sms", [132, 2, 4])  # a cluster per cluster tile; one or two clusters walking them all
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_v7_against_numpy(schedule, num_sms, operands):
    assert matmul_error(MatmulWGMMAV7(**schedule), operands, num_sms) < TOLERANCE


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("schedule", SCHEDULES[::2])
def test_v7_under_random_interleavings(schedule, seed, operands, monkeypatch):
    monkeypatch.setenv(SEED_VARIABLE, str(seed))
    assert matmul_error(MatmulWGMMAV7(**schedule), operands, num_sms=2) < TOLERANCE


@pytest.mark.parametrize("num_sms", [132, 2])
def test_warpspec_check_passes_every_schedule_with_random_interleavings(num_sms, capsys):
    v7 = Path(__file__).resolve().parents[1] / "examples" / "matmul_v7.py"
    code = main(["check", f"{v7}:MatmulWGMMAV7", f"m_size={M}", f"n_size={N}", f"k_size={K}", f"num_sms={num_sms}",
                 "--all-schedules", "--seeds", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0, lines
    assert lines[-1] == "5 ok (no hazard found, outputs not compared), 0 failed, 0 skipped"
    assert all(re.match(r"ok +num_stages=\d block_m=\d+ block_n=\d+ epilogue_n=\d+ +\(.* s, 1\+2 runs\)$", line)
               for line in lines[:-1]), lines


def test_the_timing_model_refuses_clusters_with_a_compile_error():
    from warpspec.timeline.model import model_launch

    kernel = kernel_for(MatmulWGMMAV7(num_stages=4, block_m=128, block_n=128, epilogue_n=128), {"n_size": N, "k_size": K})
    with pytest.raises(CompileError, match=r"the timing model runs the blocks of one SM and does not model "
                                           r"thread-block clusters yet: MatmulWGMMAV7 sets self.attrs.cluster_blocks "
                                           r"to \[2, 1, 1\]") as caught:
        model_launch(kernel, {"m_size": M, "num_sms": 132})
    assert caught.value.location == str(kernel.loc)


class NeverForwards(MatmulWGMMAV7):
    """Rank 1's producer arrives on its own empty barrier but never passes its consumers' release on to rank 0:
    rank 0's producer, which refills B in both blocks, waits for it forever."""

    def forward_release(self, empty, filled_before):
        self.mbarrier.arrive(empty)


def test_a_release_never_forwarded_deadlocks_at_rank_0s_acquire(operands):
    with pytest.raises(DeadlockError) as caught:
        matmul_error(NeverForwards(num_stages=3, block_m=128, block_n=256, epilogue_n=256), operands)
    text = str(caught.value)
    assert f"threads 256-287 of block rank 0: blocked at {caught.value.location.split(':')[0]}" in text
    assert "in mbarrier.wait on empty_barriers[0] of block rank 0 for phase parity 0" in text
    # Rank 0's own consumers released the stage; the forward from rank 1 is the arrival still pending.
    assert "empty_barriers[0] of block rank 0: 0 phase(s) completed, current phase parity 0, 1/3 arrivals " \
           "pending" in text


class ForwardsOnTheFirstLap(MatmulWGMMAV7):
    """Rank 1's producer forwards a release on its first lap too, when its consumers have released nothing: rank
    0 refills a stage that rank 1's consumers may still be reading."""

    def forward_release(self, empty, filled_before):
        self.mbarrier.arrive(empty, cta=0)
        self.mbarrier.arrive(empty)


def test_a_release_forwarded_before_the_consumers_made_it_is_a_race(operands):
    with pytest.raises(RaceError) as caught:
        matmul_error(ForwardsOnTheFirstLap(num_stages=3, block_m=128, block_n=256, epilogue_n=256), operands)
    assert "tma.global_to_shared multicast to ranks [0, 1] writes sb[0] of block rank 1 while an asynchronous read " \
           "of it (a wgmma or a TMA store) is still in flight" in str(caught.value)
    assert "MatmulWGMMAV7.produce at " in caught.value.location


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_v7_builds_for_sm90a(schedule):
    built = compile_kernel(kernel_for(MatmulWGMMAV7(**schedule), {"n_size": 8192, "k_size": 8192}))
    counts = sass.count_instructions(sass.disassemble(built.module.cubin),
                                     ["HGMMA", "UTMALDG.2D.MULTICAST", "UCGABAR_ARV", "UCGABAR_WAIT", "LDL", "STL"])
    stages = schedule["num_stages"]
    block_k = 64
    # Unrolled by the stage count: one multicast B load per copy of the producer's loop body.
    assert counts["UTMALDG.2D.MULTICAST"] == stages
    assert counts["HGMMA"] == stages * (schedule["block_m"] // 128) * (block_k // 16)
    assert counts["UCGABAR_ARV"] == 2 and counts["UCGABAR_WAIT"] == 2  # after init, before exit
    assert counts["LDL"] == 0 and counts["STL"] == 0
    # A remote arrival's cluster-scope release is a full memory barrier in the arriving thread: one per copy of
    # the producer's loop (rank 1's forwarded release, predicated), one per cluster barrier, none in the consumers'
    # loop, where one stalled a warpgroup at every K step.
    membars = re.findall(r"(@!?P\d+\s+)?MEMBAR\.ALL\.GPU", sass.disassemble(built.module.cubin))
    assert len(membars) == stages + 2 and sum(1 for predicate in membars if predicate) == stages
    report = next(iter(sass.parse_ptxas_log(built.module.log).values()))
    assert report.spill_store_bytes == 0 and report.stack_bytes == 0
    threads = CONSUMER_THREADS + WARPGROUP
    assert report.registers <= 255 and report.registers * threads <= 65536


@pytest.mark.gpu
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("shape", [(M, N, K), (1024, 1024, 1024), (1000, 392, 1016)])
def test_v7_against_torch(schedule, shape):
    torch = pytest.importorskip("torch")
    m, n, k = shape
    generator = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=generator)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16, generator=generator)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    with warpspec.use_backend("cuda"):
        MatmulWGMMAV7(**schedule)(m, n, k, a, b, c)
    torch.cuda.synchronize()
    assert not torch.isnan(c).any(), "some outputs were never written"
    reference = a.double() @ b.double().T
    assert (torch.linalg.norm(c.double() - reference) / torch.linalg.norm(reference)).item() < TOLERANCE
