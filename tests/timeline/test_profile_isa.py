"""warpspec.timeline.profile_isa: the timestamp statements an instrumented build records its timeline with. No kernel author
writes them (warpspec.timeline.instrument inserts them), so the family makes no checks of a user's call; this file
holds the record buffer's layout against hand-computed offsets, that the emulator runs an instrumented kernel as the
plain one (the statements are no-ops there), and the clock reads in the machine code. Which sites get them is
tests/timeline/test_instrument.py's; decoding tests/timeline/test_gpu_decode.py's; the GPU run
tests/timeline/test_profile_gpu.py's (``gpu``-marked)."""

import numpy as np
import pytest

from tests.isa.test_tma import TileCopy
from warpspec.cuda import sass
from warpspec.cuda.codegen import generate
from warpspec.cuda.launch import compile_kernel
from warpspec.timeline import profile_isa as profile
from warpspec.emulator.run import emulate_kernel
from warpspec.timeline.instrument import PARAMETER, instrument
from warpspec.runtime import kernel_for


def test_a_slot_counter_counts_blocks_in_its_low_bits_under_the_launch_tag():
    tag = 0x2A << profile.COUNT_BITS
    assert profile.blocks_counted(tag | 7) == 7
    assert profile.blocks_counted(profile.COUNT_MASK) == (1 << 24) - 1


@pytest.mark.parametrize("slot, recorder, recorders, capacity", [(0, 0, 1, 4), (2, 1, 3, 16), (5, 4, 5, 64)])
def test_each_recorders_array_follows_the_counters_in_slot_major_order(slot, recorder, recorders, capacity):
    words = 8 + 3 * capacity  # the header, then capacity events of site|index, start clock, end clock
    assert profile.array_words(capacity) == words
    assert profile.array_start(slot, recorder, recorders, capacity) == recorders + (slot * recorders + recorder) * words


def test_the_emulator_runs_an_instrumented_kernel_as_the_plain_one():
    instrumented = instrument(kernel_for(TileCopy(), {}), blocks=2, capacity=16)
    src = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float16)
    dst = np.full_like(src, np.nan)
    records = np.zeros(len(instrumented.recorders) * (1 + 2 * profile.array_words(16)), np.int64)
    emulate_kernel(instrumented.kernel, {"m": 64, "n": 64, "src_ptr": src, "dst_ptr": dst, PARAMETER: records})
    np.testing.assert_array_equal(dst, src)
    assert not records.any()  # the CPU timing model times kernels; the statements write nothing here


def test_the_instrumented_build_reads_the_global_timer_and_the_clock():
    kernel = instrument(kernel_for(TileCopy(), {}), blocks=2, capacity=16).kernel
    source = generate(kernel).source
    assert "%globaltimer" in source and "%clock64" in source and "%smid" in source
    text = sass.disassemble(compile_kernel(kernel).module.cubin)
    assert "SR_GLOBALTIMER" in text and "SR_CLOCK" in text


def test_an_events_first_word_packs_its_site_index_phase_and_tile():
    # Site in bits 0-15, index in 16-31, the wait's parity in bit 32, the tile in 33-63: the timestamps keep their
    # own 64-bit words.
    assert profile.event_fields(5 | 3 << 16 | 1 << 32 | 7 << 33) == (5, 3, 1, 7)
    most = 0xFFFF | 0xFFFF << 16 | 1 << 32 | (2**31 - 1) << 33
    assert most == 2**64 - 1 and profile.event_fields(most) == (2**16 - 1, 2**16 - 1, 1, 2**31 - 1)
    assert profile.EVENT_WORDS == 3
