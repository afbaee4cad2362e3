"""WGMMA register fragments: coverage, known positions, gather/scatter."""

from __future__ import annotations

import numpy as np
import pytest

from warpspec.layout.fragments import AccumulatorLayout, a_register_fragment, accumulator_fragment


@pytest.mark.parametrize("n", [8, 16, 64, 128, 200, 256])
def test_accumulator_fragment_covers_tile_once(n):
    rows, cols = accumulator_fragment(n)
    assert rows.shape == cols.shape == (128, n // 2)
    counts = np.zeros((64, n), dtype=np.int64)
    np.add.at(counts, (rows, cols), 1)
    assert np.all(counts == 1)


def test_accumulator_fragment_known_positions():
    rows, cols = accumulator_fragment(64)
    assert list(zip(rows[0, :4], cols[0, :4])) == [(0, 0), (0, 1), (8, 0), (8, 1)]
    assert (rows[0, 4], cols[0, 4]) == (0, 8)
    # thread 37: warp 1, lane 5 -> row 16 + 1, col 2*(5&3) = 2
    assert (rows[37, 0], cols[37, 0]) == (17, 2)
    assert (rows[37, 3], cols[37, 3]) == (25, 3)
    assert (rows[127, 31], cols[127, 31]) == (63, 63)


@pytest.mark.parametrize(
    "m,n,warpgroups,instr_n,regs",
    [
        (64, 64, 1, 64, 32),
        (128, 128, 1, 128, 128),
        (128, 256, 2, 256, 128),
        (256, 64, 2, 64, 64),
        (64, 512, 1, 256, 256),
        (64, 384, 1, 192, 192),
        (64, 264, 1, 88, 132),
    ],
)
def test_accumulator_layout(m, n, warpgroups, instr_n, regs):
    layout = AccumulatorLayout(m, n, warpgroups)
    assert layout.instr_n == instr_n
    assert layout.registers_per_thread() == regs == (m // warpgroups // 64) * (n // 2)
    t = np.arange(128 * warpgroups)[:, None]
    r = np.arange(regs)[None, :]
    rows, cols = layout.element_of(t, r)
    counts = np.zeros((m, n), dtype=np.int64)
    np.add.at(counts, (rows, cols), 1)
    assert np.all(counts == 1)
    # Each warpgroup owns its own band of rows.
    per_group = m // warpgroups
    assert np.all(rows // per_group == t // 128)
    tile = np.random.default_rng(0).standard_normal((m, n)).astype(np.float32)
    regs_arr = layout.gather(tile)
    assert regs_arr.shape == (128 * warpgroups, regs)
    np.testing.assert_array_equal(layout.scatter(regs_arr), tile)
    assert regs_arr[0, 2] == tile[8, 0]


def test_accumulator_layout_matches_single_instruction():
    layout = AccumulatorLayout(64, 96)
    rows, cols = accumulator_fragment(96)
    got_rows, got_cols = layout.element_of(np.arange(128)[:, None], np.arange(48)[None, :])
    np.testing.assert_array_equal(got_rows, rows)
    np.testing.assert_array_equal(got_cols, cols)
    # Second m64 block starts at register n/2 and row 64.
    two = AccumulatorLayout(128, 64)
    assert tuple(int(v) for v in two.element_of(0, 32)) == (64, 0)
    # Explicit instr_n splits N: second instruction starts at register instr_n/2, column instr_n.
    split = AccumulatorLayout(64, 128, instr_n=64)
    assert tuple(int(v) for v in split.element_of(0, 32)) == (0, 64)


def test_accumulator_layout_bad_shapes():
    with pytest.raises(ValueError, match=r"\[96, 64\]"):
        AccumulatorLayout(96, 64)
    with pytest.raises(ValueError, match=r"\[64, 60\]"):
        AccumulatorLayout(64, 60)
    with pytest.raises(ValueError, match=r"\[64, 64\] over 2"):
        AccumulatorLayout(64, 64, warpgroups=2)
    with pytest.raises(ValueError, match=r"\[64, 128\].*instr_n"):
        AccumulatorLayout(64, 128, instr_n=48)
    with pytest.raises(ValueError, match=r"\[64, 12\]"):
        accumulator_fragment(12)
    with pytest.raises(ValueError, match=r"\[64, 264\]"):
        accumulator_fragment(264)
    layout = AccumulatorLayout(64, 64)
    with pytest.raises(ValueError, match=r"\(64, 32\)"):
        layout.gather(np.zeros((64, 32)))
    with pytest.raises(ValueError, match="expected"):
        layout.scatter(np.zeros((128, 31)))


def test_a_register_fragment():
    rows, ks = a_register_fragment()
    assert rows.shape == ks.shape == (128, 4)
    assert list(zip(rows[0], ks[0])) == [(0, 0), (8, 0), (0, 8), (8, 8)]
    assert (rows[37, 1], ks[37, 1]) == (25, 2)
    erows, eks = a_register_fragment(per_element=True)
    assert erows.shape == (128, 8)
    counts = np.zeros((64, 16), dtype=np.int64)
    np.add.at(counts, (erows, eks), 1)
    assert np.all(counts == 1)
    np.testing.assert_array_equal(eks[:, 0::2], ks)
    np.testing.assert_array_equal(eks[:, 1::2], ks + 1)
    np.testing.assert_array_equal(erows[:, 1::2], rows)
