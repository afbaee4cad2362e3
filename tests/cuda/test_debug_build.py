"""Debug builds (warpspec.debug): every barrier wait bounded and numbered, the plain build untouched, and the message
a wait that gave up becomes. The GPU side is tests/cuda/test_debug_gpu.py."""

import re

from tests.kernels import buggy_kernels as bk
import warpspec
from warpspec.cuda import debug
from warpspec.cuda.codegen import DebugSite, generate
from warpspec.cuda.compiler import compile_cuda
from warpspec.runtime import kernel_for


def kernel():
    return kernel_for(bk.ConsumerNeverReleases(), {"n_size": 64, "k_size": 256})


def test_a_debug_build_bounds_and_numbers_every_barrier_wait():
    plain, debugging = generate(kernel()), generate(kernel(), debug=True)
    body = 'extern "C" __global__'
    waits = re.findall(r"\bmbar_wait\(", plain.source.split(body)[1])
    bounded = re.findall(r"mbar_wait_debug\(\(smem \+ [^,]+\), [^,]+, (\d+)u, static_cast<unsigned>\(([^;]+)\)\);",
                         debugging.source.split(body)[1])
    assert len(bounded) == len(waits) > 0 and not re.findall(r"\bmbar_wait\(", debugging.source.split(body)[1])
    assert [int(site) for site, _ in bounded] == list(range(len(bounded)))
    assert len(debugging.debug_sites) == len(bounded)
    first = debugging.debug_sites[0]
    assert first.barrier == "producer_barriers" and first.threads == (128, 32)
    assert first.loc == f"{bk.__file__}:{bk.marker_line('v3-produce')} -> V3.produce at " \
                        f"{bk.__file__}:{bk.marker_line('v3-producer-wait')}"
    assert compile_cuda(debugging.source).cubin[:4] == b"\x7fELF"


def test_the_plain_build_has_no_debug_code():
    plain = generate(kernel())
    assert "mbar_wait_debug" not in plain.source and "warpspec_debug_record" not in plain.source
    assert plain.debug_sites == ()


class _Launched(Exception):
    """Stops a launch path after recording which one a call took."""


def test_debug_mode_sends_gpu_launches_to_the_debug_build(monkeypatch):
    """Out of debug mode a call goes to the plain launch path; in it, to the debug build's (even after the plain
    path made the Script a plan entry)."""
    import numpy as np

    from warpspec.cuda import launch

    taken = []

    def record(name):
        def launch_path(kernel, arguments, *rest, **options):
            taken.append(name)
            raise _Launched
        return launch_path

    monkeypatch.setattr(launch, "launch_planned", record("plain"))
    monkeypatch.setattr(debug, "run_debug", record("debug"))
    script = bk.ConsumerNeverReleases()
    arrays = (np.zeros((128, 256), np.float16), np.zeros((64, 256), np.float16), np.zeros((128, 64), np.float16))
    with warpspec.use_backend("cuda"):
        for mode in (False, True, False):
            with warpspec.debug(mode):
                try:
                    script(128, 64, 256, *arrays)
                except _Launched:
                    pass
    assert taken == ["plain", "debug", "plain"]


def test_a_wait_that_gave_up_names_the_barrier_phase_role_and_line():
    site = DebugSite("producer_barriers", "kernel.py:40 -> V3.produce at kernel.py:59", (128, 32))
    words = (1, (3 << 21) | 2, (1 << 32) | (0 << 16) | 128, 0)  # block (2, 3, 0), thread 128, index 1, parity 0
    error = debug._timeout(site, words, 0.52)
    assert isinstance(error, warpspec.BarrierTimeoutError) and isinstance(error, warpspec.KernelError)
    assert error.location == "kernel.py:40 -> V3.produce at kernel.py:59"
    assert str(error) == (
        "kernel.py:40 -> V3.produce at kernel.py:59: debug mode: mbarrier.wait on producer_barriers[1] for phase "
        "parity 0 did not pass within 0.25 s (threads [128, 160) wait there; thread 128 of block (2, 3, 0) gave up, "
        "the kernel was stopped after 0.5 s). The GPU context of this process cannot be used after the stop: "
        "restart it to run kernels again")


def test_debug_mode_is_switched_by_the_api_and_restored():
    from warpspec import runtime

    before = runtime._debugging
    with warpspec.debug():
        assert runtime._debugging is True
        with warpspec.debug(False):
            assert runtime._debugging is False
        assert runtime._debugging is True
    assert runtime._debugging == before
    warpspec.set_debug(True)
    try:
        assert runtime._debugging is True
    finally:
        warpspec.set_debug(before)
