"""Flags order only what the docs say they order: a wait by one thread covers the other threads' loads only after
a sync orders them after it, a signal by one thread publishes the other threads' stores only when a sync ordered
them before it (whatever the thread groups: here there is one partition), flags may not share memory with data,
and the arrays a kernel uses as flags are found for ``warpspec check``'s made-up inputs to start at zero."""

from __future__ import annotations

import numpy as np
import pytest

from tests.kernels import flag_ordering_kernels as kfo
from tests.support.example_checks import emulator  # noqa: F401  (autouse: the emulator, its deterministic schedule)
from warpspec import ArgumentError, RaceError
from warpspec.arguments import flag_pointers
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.runtime import kernel_for

BLOCKS = 3
SEEDS = [None, 0, 1, 2, 3, 5, 8, 13]


def at(marker: str) -> str:
    return f"{kfo.__file__}:{kfo.marker_line(marker)}"


def operands(rng):
    """Random inputs as ``warpspec check`` makes them: every array random, the flags zeroed."""
    x, ws, flags, out = (rng.standard_normal((BLOCKS * kfo.ROWS, 64)).astype(np.float32),
                         rng.standard_normal((BLOCKS * kfo.ROWS, 64)).astype(np.float32),
                         rng.integers(-5, 5, BLOCKS).astype(np.int32),
                         rng.standard_normal((BLOCKS * kfo.ROWS, 64)).astype(np.float32))
    arguments = {"x_ptr": x, "ws_ptr": ws, "flags_ptr": flags, "out_ptr": out}
    for name in flag_pointers(kernel_for(kfo.HandOff(), {"blocks": BLOCKS})):
        arguments[name][...] = 0
    return arguments


def run_seeded(monkeypatch, kernel, seed, arguments):
    if seed is None:
        monkeypatch.delenv(SEED_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(SEED_VARIABLE, str(seed))
    kernel(BLOCKS, **arguments)


def test_the_flag_arrays_of_a_kernel_are_the_pointers_its_flag_views_use():
    assert flag_pointers(kernel_for(kfo.HandOff(), {"blocks": BLOCKS})) == ("flags_ptr",)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_correct_hand_off_passes_with_random_inputs(monkeypatch, seed):
    arguments = operands(np.random.default_rng(seed or 0))
    run_seeded(monkeypatch, kfo.HandOff(), seed, arguments)
    expected = np.cumsum(arguments["x_ptr"].reshape(BLOCKS, kfo.ROWS, 64), axis=0, dtype=np.float32)
    np.testing.assert_allclose(arguments["out_ptr"], expected.reshape(-1, 64), rtol=1e-6)
    assert arguments["flags_ptr"].tolist() == [0] * BLOCKS


@pytest.mark.parametrize("seed", SEEDS)
def test_threads_that_did_not_wait_read_without_a_sync_after_the_wait(monkeypatch, seed):
    with pytest.raises(RaceError) as caught:
        run_seeded(monkeypatch, kfo.HandOff(sync_after_wait=False), seed, operands(np.random.default_rng(0)))
    assert caught.value.location == at("read")
    message = str(caught.value)
    assert "load_global in block (1, 0, 0) reads ws[0, 0] (argument 'ws_ptr'), which block (0, 0, 0) wrote" in message
    assert ("the flag.wait was made by threads 0 only, and no self.sync() after it orders threads 0-127 after the "
            "wait") in message


@pytest.mark.parametrize("seed", SEEDS)
def test_one_thread_signals_before_a_sync_ordered_the_others_stores(monkeypatch, seed):
    with pytest.raises(RaceError) as caught:
        run_seeded(monkeypatch, kfo.HandOff(sync_before_signal=False), seed, operands(np.random.default_rng(0)))
    assert caught.value.location == at("read")
    message = str(caught.value)
    assert f"which block (0, 0, 0) wrote (store_global of ws, argument 'ws_ptr', at {at('leave')})" in message
    assert (f"the flag.signal of block (0, 0, 0) was made by threads 0 only, and no self.sync() after threads 0-127 "
            f"stored (store_global of ws, argument 'ws_ptr', at {at('leave')}) ordered their stores before it"
            ) in message


def test_flags_sharing_memory_with_the_output_are_refused_naming_both():
    arguments = operands(np.random.default_rng(0))
    arguments["flags_ptr"] = arguments["out_ptr"].reshape(-1).view(np.int32)[-BLOCKS:]
    arguments["flags_ptr"][...] = 0
    with pytest.raises(ArgumentError) as caught:
        kfo.HandOff()(BLOCKS, **arguments)
    assert ("argument 'flags_ptr' holds the flags of flag.signal/flag.wait, and its array shares memory with "
            "argument 'out_ptr'") in str(caught.value)
