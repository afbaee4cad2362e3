"""Flags in global memory (self.flag.signal / self.flag.wait): a block hands data to a later block, and the emulator
names each way to get the hand-off wrong at its line; the CUDA build emits the release store and the acquire spin.
The GPU side is tests/isa/test_flag_gpu.py."""

import numpy as np
import pytest

from tests.kernels import flag_kernels as fk
from tests.support.example_checks import emulator  # noqa: F401  (autouse: the emulator, its deterministic schedule)
import warpspec
from warpspec import CompileError, DeadlockError, RaceError, Script, float32, int32
from warpspec.cuda.codegen import generate
from warpspec.cuda.compiler import compile_cuda
from warpspec.cuda.sass import count_instructions, disassemble
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.runtime import kernel_for

BLOCKS = 4


def at(marker: str) -> str:
    return f"{fk.__file__}:{fk.marker_line(marker)}"


def operands(seed=0):
    x = np.random.default_rng(seed).standard_normal((BLOCKS * fk.ROWS, 64)).astype(np.float32)
    return x, np.zeros_like(x), np.zeros(BLOCKS, np.int32), np.zeros_like(x)


def running_sum(x):
    return np.cumsum(x.reshape(BLOCKS, fk.ROWS, 64), axis=0, dtype=np.float32).reshape(-1, 64)


def test_a_read_only_flags_array_is_refused_before_the_run():
    """flag.signal writes the flags array: a read-only one is an ArgumentError naming it before any block runs,
    not numpy's "assignment destination is read-only" in the middle of the run."""
    x, ws, flags, out = operands()
    flags.flags.writeable = False
    with pytest.raises(warpspec.ArgumentError, match=r"argument 'flags_ptr': the kernel writes this array, but it "
                                                     r"is read-only"):
        fk.RunningSum()(BLOCKS, x, ws, flags, out)
    assert not out.any()


def test_a_block_reads_what_the_block_before_it_left_after_waiting_for_its_flag():
    x, ws, flags, out = operands()
    fk.RunningSum()(BLOCKS, x, ws, flags, out)
    np.testing.assert_allclose(out, running_sum(x), rtol=1e-6)
    assert flags.tolist() == [0] * BLOCKS  # every flag was given back its value for the next launch


def test_a_second_launch_with_the_same_flags_runs_too(monkeypatch):
    x, ws, flags, out = operands()
    kernel = fk.RunningSum()
    for seed in (None, 3):
        if seed is not None:
            monkeypatch.setenv(SEED_VARIABLE, str(seed))
        out[...] = 0
        kernel(BLOCKS, x, ws, flags, out)
        np.testing.assert_allclose(out, running_sum(x), rtol=1e-6)


def test_the_workspace_is_scratch_and_not_an_unwritten_output(recwarn):
    """The last block's sum is left in ws too, but a scratch view that is written in part is no finding."""
    x, ws, flags, out = operands()
    fk.RunningSum()(1, x[:fk.ROWS], ws[:fk.ROWS], flags[:1], out[:fk.ROWS])
    assert not [w for w in recwarn if issubclass(w.category, warpspec.UnwrittenOutputWarning)]


PLANTED = [
    pytest.param(dict(wait=False), RaceError, "read",
                 ["load_global in block (1, 0, 0) reads ws[8, 0] (argument 'ws_ptr'), which block (0, 0, 0) wrote "
                  f"(store_global of ws, argument 'ws_ptr', at {at('leave')})",
                  "(to hand data from one block to a later one, use self.flag.signal and self.flag.wait)"],
                 id="no-wait"),
    pytest.param(dict(sync_before_signal=False), RaceError, "read",
                 ["load_global in block (1, 0, 0) reads ws[8, 0] (argument 'ws_ptr'), which block (0, 0, 0) wrote",
                  "unless a flag orders the two: a flag.wait of this block, before this access, that passed on a "
                  "flag.signal the other block made after its access"], id="signal-before-sync"),
    pytest.param(dict(wait_for="next"), DeadlockError, "wait",
                 ["in flag.wait until flags[2] == 1 (it holds 0; only this block or a block launched before it can "
                  "set it: a later block need not run until this one ends)"], id="waits-for-a-later-block"),
    pytest.param(dict(reset=False), RaceError, "wait",
                 ["flag.wait in block (1, 0, 0) for flags[0] == 1 may pass before block (0, 0, 0)'s flag.signal: "
                  "flags[0] already held 1 when the launch began"], id="flags-left-set"),
]


@pytest.mark.parametrize("planted, error, marker, fragments", PLANTED)
def test_each_planted_hand_off_mistake_is_named_at_its_line(planted, error, marker, fragments):
    x, ws, flags, out = operands()
    kernel = fk.RunningSum(**planted)
    with pytest.raises(error) as caught:
        kernel(BLOCKS, x, ws, flags, out)
        kernel(BLOCKS, x, ws, flags, out)  # a mistake that shows only in the next launch (flags left set)
    assert caught.value.location == at(marker)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_a_count_of_adds_hands_every_block_s_tile_to_the_last_in_one_wait(monkeypatch):
    """flag.add: the last block's one wait for the total acquires every counted block's stores; the flag is given
    back; a second launch (another interleaving) is right too."""
    x = np.random.default_rng(1).standard_normal((BLOCKS * fk.ROWS, 64)).astype(np.float32)
    flags, out = np.zeros(1, np.int32), np.zeros((fk.ROWS, 64), np.float32)
    for seed in (None, 5):
        if seed is not None:
            monkeypatch.setenv(SEED_VARIABLE, str(seed))
        fk.CountedSum()(BLOCKS, x, np.zeros_like(x), flags, out)
        np.testing.assert_allclose(out, x.reshape(BLOCKS, fk.ROWS, 64).sum(0), atol=1e-6)  # float32 sums
        assert flags.tolist() == [0]


def test_a_wait_for_a_count_the_adds_pass_is_a_deadlock_at_the_wait():
    """Waiting for fewer adds than the blocks make: the count may pass the value before the wait sees it (the
    emulator runs the blocks in launch order, so it always has), and the wait never ends."""
    x = np.random.default_rng(1).standard_normal((BLOCKS * fk.ROWS, 64)).astype(np.float32)
    with pytest.raises(DeadlockError) as caught:
        fk.CountedSum(counted=BLOCKS - 2)(BLOCKS, x, np.zeros_like(x), np.zeros(1, np.int32),
                                          np.zeros((fk.ROWS, 64), np.float32))
    assert caught.value.location == at("count")
    assert "in flag.wait until flags[0] == 2 (it holds 3;" in str(caught.value)


def test_the_cuda_build_counts_with_a_release_reduction():
    generated = generate(kernel_for(fk.CountedSum(), {}))
    body = generated.source.split('extern "C" __global__')[1]
    assert body.count("red.release.gpu.global.add.s32") == 1 and body.count("flag_wait(") == 1
    # The release is a GPU memory barrier before a strong reduction, as a signal's is before its store.
    counts = count_instructions(disassemble(compile_cuda(generated.source).cubin), ["REDG.E.ADD.S32.STRONG.GPU",
                                                                                     "MEMBAR.ALL.GPU"])
    assert counts == {"REDG.E.ADD.S32.STRONG.GPU": 1, "MEMBAR.ALL.GPU": 2}, counts  # the add's and the reset's


class _OutOfRange(Script):
    def __call__(self, blocks: int32, flags_ptr: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        flags = self.global_view(flags_ptr, dtype=int32, shape=[blocks])
        with self.single_thread():
            self.flag.wait(flags, blocks, 0)


def test_a_flag_index_outside_the_view_is_a_bounds_error():
    with pytest.raises(warpspec.BoundsError, match=r"flag.wait: index 4 is outside flags \(size 4\)"):
        _OutOfRange()(BLOCKS, np.zeros(BLOCKS, np.int32))


class _FloatFlags(Script):
    def __call__(self, flags_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        flags = self.global_view(flags_ptr, dtype=float32, shape=[4])
        self.flag.signal(flags, 0, 1)  # <<< float-flags


def test_flags_must_be_a_one_dimensional_int32_view():
    with pytest.raises(CompileError) as caught:
        _FloatFlags()(np.zeros(4, np.float32))
    assert "flag.signal flags must be a 1-D int32 global view; flags is float32 with 1 dimensions" in str(caught.value)
    assert caught.value.location.startswith(f"{__file__}:")


def test_the_cuda_build_releases_at_gpu_scope_and_spins_with_acquire_loads():
    generated = generate(kernel_for(fk.RunningSum(), {"blocks": BLOCKS}))
    body = generated.source.split('extern "C" __global__')[1]
    assert body.count("fence.acq_rel.gpu;\\n st.relaxed.gpu.global.b32") == 2  # the signal and the reset
    assert body.count("flag_wait(") == 1
    cubin = compile_cuda(generated.source).cubin
    # The acquire load is a strong GPU-scope load followed by an L1 invalidation; each release a full GPU memory
    # barrier before a strong store.
    counts = count_instructions(disassemble(cubin), ["LDG.E.STRONG.GPU", "STG.E.STRONG.GPU", "MEMBAR.ALL.GPU",
                                                     "CCTL.IVALL"])
    assert counts == {"LDG.E.STRONG.GPU": 1, "STG.E.STRONG.GPU": 2, "MEMBAR.ALL.GPU": 2, "CCTL.IVALL": 3}, counts
