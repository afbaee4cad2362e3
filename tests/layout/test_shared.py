"""TMA placement and WGMMA descriptors must agree: write a tile as TMA does, read it back as WGMMA would."""

from __future__ import annotations

import numpy as np
import pytest

from warpspec import dtypes
from warpspec.layout.shared import (
    SWIZZLE_MODES,
    Box,
    bits_of,
    choose_shared_layout,
    decode_descriptor,
    make_descriptor,
    physical_offset,
    read_tile,
    tma_box_bytes,
    tma_boxes,
    tma_write_tile,
    values_of,
    wgmma_descriptor,
    wgmma_k_per_step,
    wgmma_k_steps,
    wgmma_read_operand,
    wgmma_subtile_descriptor,
)

BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32}

K_MAJOR_CASES = [
    (dtypes.bfloat16, 64, 64),
    (dtypes.float16, 64, 64),
    (dtypes.bfloat16, 128, 64),
    (dtypes.float16, 128, 64),
    (dtypes.bfloat16, 128, 32),
    (dtypes.float16, 64, 16),
    (dtypes.bfloat16, 64, 16),
    (dtypes.bfloat16, 256, 64),
    (dtypes.float8_e4m3, 128, 128),
    (dtypes.bfloat16, 512, 64),  # rows > 256: two row boxes
    (dtypes.float32, 64, 32),  # tf32-style k8 steps
]

# MN-major B tiles: rows = K, cols = N.
MN_MAJOR_CASES = [
    (dtypes.bfloat16, 64, 64),
    (dtypes.bfloat16, 64, 128),
    (dtypes.float16, 32, 64),
    (dtypes.bfloat16, 16, 256),
    (dtypes.bfloat16, 32, 96),
    # Attention's V tiles [block_n, D] read as B [K = block_n, N = D]: one atom (D = 64), four atoms and K = 80
    # (D = 256's 80-row tiles: five k16 steps, the last starting 64 rows in).
    (dtypes.float16, 128, 64),
    (dtypes.float16, 80, 256),
    (dtypes.bfloat16, 80, 64),
]


def allowed_swizzles(dtype, cols):
    """Every swizzle whose span divides the inner byte extent (0 = none needs 16 B)."""
    inner = cols * dtype.nbytes
    return [sw for sw in SWIZZLE_MODES if inner % (sw or 16) == 0]


def hf_swizzle(address, span):
    """docs/hardware.md §2 formula on an absolute shared address."""
    return address ^ (((address >> 7) & (span // 16 - 1)) << 4)


def simulate_tma(smem, layout, base, tile_bits):
    """Write ``tile_bits`` box by box as the TMA unit does, checking physical_offset against the absolute formula."""
    elem = layout.elem_bytes
    span = layout.swizzle_bytes or 16
    for box in tma_boxes(layout):
        box_cols, box_rows = box.box_dims
        col0, row0 = box.coords
        r, c = np.indices((box_rows, box_cols))
        # TMA packs box rows densely, then swizzles the absolute destination address (HF §2).
        absolute = hf_swizzle(base + box.smem_offset + r * box_cols * elem + c * elem, span)
        via_layout = base + physical_offset(layout, row0 + r, col0 + c)
        np.testing.assert_array_equal(absolute, via_layout)
        data = np.ascontiguousarray(tile_bits[row0 : row0 + box_rows, col0 : col0 + box_cols])
        smem[via_layout[..., None] + np.arange(elem)] = data.view(np.uint8).reshape(box_rows, box_cols, elem)


def random_tile(rng, dtype, rows, cols):
    return rng.integers(0, 1 << (8 * dtype.nbytes), size=(rows, cols), dtype=np.uint64).astype(BITS[dtype.nbytes])


def fresh_smem(rng, layout, base):
    # Junk everywhere, so reading a byte TMA did not write shows up as a mismatch.
    return rng.integers(0, 256, size=base + layout.nbytes + 4096, dtype=np.uint8)


@pytest.mark.parametrize("dtype,rows,cols", K_MAJOR_CASES, ids=lambda v: getattr(v, "name", v))
def test_k_major_descriptors_read_back_tma_tile(dtype, rows, cols):
    rng = np.random.default_rng(rows * 1000 + cols)
    for swizzle in allowed_swizzles(dtype, cols):
        layout = choose_shared_layout(dtype, rows, cols, swizzle=swizzle)
        assert layout.swizzle_bytes == swizzle
        base = 3 * layout.alignment + 2048  # aligned but not at 0
        smem = fresh_smem(rng, layout, base)
        tile = random_tile(rng, dtype, rows, cols)
        simulate_tma(smem, layout, base, tile)
        np.testing.assert_array_equal(read_tile(smem, layout, base), tile)
        kper = wgmma_k_per_step(dtype)
        steps = wgmma_k_steps(layout, "K")
        assert steps == cols // kper
        for k in range(steps):
            want = tile[:, k * kper : (k + 1) * kper]
            if rows <= 256:  # one B operand covers all rows (N <= 256)
                desc = wgmma_descriptor(layout, base, "K", k)
                got = wgmma_read_operand(smem, desc, rows, kper, dtype, "K")
                assert got.dtype == tile.dtype
                np.testing.assert_array_equal(got, want, err_msg=f"swizzle {swizzle} k_step {k}")
            for r0 in range(0, rows, 64):  # m64 A sub-tiles
                desc = wgmma_subtile_descriptor(layout, base, "K", k, r0)
                got = wgmma_read_operand(smem, desc, 64, kper, dtype, "K")
                np.testing.assert_array_equal(got, want[r0 : r0 + 64], err_msg=f"swizzle {swizzle} k {k} r0 {r0}")


@pytest.mark.parametrize("dtype,k_rows,n_cols", MN_MAJOR_CASES, ids=lambda v: getattr(v, "name", v))
def test_mn_major_descriptors_read_back_tma_tile(dtype, k_rows, n_cols):
    rng = np.random.default_rng(k_rows * 1000 + n_cols + 7)
    swizzles = allowed_swizzles(dtype, n_cols)
    if n_cols * dtype.nbytes % 128 == 0:
        assert 128 in swizzles and 64 in swizzles  # the brief's required MN cases
    for swizzle in swizzles:
        layout = choose_shared_layout(dtype, k_rows, n_cols, swizzle=swizzle)
        base = layout.alignment * 5
        smem = fresh_smem(rng, layout, base)
        tile = random_tile(rng, dtype, k_rows, n_cols)
        simulate_tma(smem, layout, base, tile)
        assert wgmma_k_steps(layout, "MN") == k_rows // 16
        for k in range(k_rows // 16):
            want = tile[k * 16 : (k + 1) * 16, :].T  # operand is [N, K]
            desc = wgmma_descriptor(layout, base, "MN", k)
            got = wgmma_read_operand(smem, desc, n_cols, 16, dtype, "MN")
            np.testing.assert_array_equal(got, want, err_msg=f"swizzle {swizzle} k_step {k}")
            # Split N across instructions at whole swizzle atoms.
            for n0 in range(0, n_cols, layout.box_cols):
                width = min(layout.box_cols, n_cols - n0)
                desc = wgmma_subtile_descriptor(layout, base, "MN", k, n0)
                got = wgmma_read_operand(smem, desc, width, 16, dtype, "MN")
                np.testing.assert_array_equal(got, want[n0 : n0 + width], err_msg=f"sw {swizzle} k {k} n0 {n0}")


def test_descriptor_bit_fields_128b_k_major():
    layout = choose_shared_layout(dtypes.bfloat16, 64, 64)
    assert (layout.swizzle_bytes, layout.alignment, layout.box_cols, layout.num_boxes) == (128, 1024, 64, 1)
    desc = wgmma_descriptor(layout, 0x400, "K", 0)
    assert (desc >> 62) & 0x3 == 1  # layout code 1 = 128B (HF §3)
    assert (desc >> 32) & 0x3FFF == 1024 >> 4 == 64  # SBO
    assert desc & 0x3FFF == 0x40  # start address >> 4
    assert (desc >> 49) & 0x7 == 0  # base offset
    assert (desc >> 16) & 0x3FFF == 1  # LBO unused, "assumed 1"
    other = desc & ~((0x3FFF) | (0x3FFF << 16) | (0x3FFF << 32) | (0x7 << 49) | (0x3 << 62))
    assert other == 0
    # bf16 k16 advance: +32 B -> +2 in the start field (HF §3 "Advancing along K").
    assert [wgmma_descriptor(layout, 0x400, "K", k) & 0x3FFF for k in range(4)] == [0x40, 0x42, 0x44, 0x46]
    assert desc == make_descriptor(0x400, 16, 1024, 128)
    assert decode_descriptor(desc) == (0x400, 16, 1024, 0, 128)


def test_descriptor_fields_other_modes():
    bf16 = dtypes.bfloat16
    d64 = decode_descriptor(wgmma_descriptor(choose_shared_layout(bf16, 64, 64, swizzle=64), 0, "K", 1))
    assert (d64.swizzle_bytes, d64.sbo, d64.start) == (64, 512, 32)
    assert (wgmma_descriptor(choose_shared_layout(bf16, 64, 64, swizzle=64), 0, "K", 0) >> 62) == 2
    # k_step 2 crosses into the second 64-B box: 64 rows * 64 B = 4096 further.
    assert decode_descriptor(wgmma_descriptor(choose_shared_layout(bf16, 64, 64, swizzle=64), 0, "K", 2)).start == 4096
    d32 = wgmma_descriptor(choose_shared_layout(bf16, 64, 64, swizzle=32), 0, "K", 0)
    assert (d32 >> 62, decode_descriptor(d32).sbo) == (3, 256)
    # K-major no swizzle: LBO = distance between K-adjacent cores (1024 for 64 rows, the probe's value), SBO = 128.
    dn = decode_descriptor(wgmma_descriptor(choose_shared_layout(bf16, 64, 64, swizzle=0), 0, "K", 0))
    assert (dn.swizzle_bytes, dn.lbo, dn.sbo) == (0, 1024, 128)
    # MN-major 64B B tile of 64 k-rows: LBO 4096 (next 32-wide atom/box), SBO 512 (HF §3 table).
    dmn = decode_descriptor(wgmma_descriptor(choose_shared_layout(bf16, 64, 64, swizzle=64), 0, "MN", 1))
    assert (dmn.swizzle_bytes, dmn.lbo, dmn.sbo, dmn.start) == (64, 4096, 512, 16 * 64)
    dmn128 = decode_descriptor(wgmma_descriptor(choose_shared_layout(bf16, 64, 64), 0, "MN", 1))
    assert (dmn128.sbo, dmn128.start) == (1024, 16 * 128)
    # Address field keeps only addr & 0x3FFFF.
    layout = choose_shared_layout(bf16, 64, 64)
    assert wgmma_descriptor(layout, 0x40000 + 0x400, "K", 0) & 0x3FFF == 0x40


def test_choose_layout_defaults():
    cases = {
        (dtypes.bfloat16, 64, 64): (128, 64, 1, 1024),
        (dtypes.bfloat16, 128, 32): (64, 32, 1, 512),
        (dtypes.bfloat16, 64, 16): (32, 16, 1, 256),
        (dtypes.bfloat16, 64, 8): (0, 8, 1, 128),
        (dtypes.bfloat16, 64, 128): (128, 64, 2, 1024),
        (dtypes.float8_e4m3, 128, 128): (128, 128, 1, 1024),
        (dtypes.float32, 64, 16): (64, 16, 1, 512),
    }
    for (dtype, rows, cols), (sw, box_cols, boxes, align) in cases.items():
        layout = choose_shared_layout(dtype, rows, cols)
        got = (layout.swizzle_bytes, layout.box_cols, layout.num_boxes, layout.alignment)
        assert got == (sw, box_cols, boxes, align)
        assert layout.nbytes == rows * cols * dtype.nbytes
        assert layout.tx_bytes == layout.nbytes


def test_tma_boxes_and_bytes():
    layout = choose_shared_layout(dtypes.bfloat16, 64, 64, swizzle=64)
    assert tma_boxes(layout) == [
        Box(0, (32, 64), (0, 0), 4096),
        Box(4096, (32, 64), (32, 0), 4096),
    ]
    assert tma_box_bytes(layout) == 4096
    big = choose_shared_layout(dtypes.bfloat16, 512, 128)
    assert (big.row_boxes, big.box_rows, big.num_boxes) == (2, 256, 2)
    boxes = tma_boxes(big)
    assert [b.smem_offset for b in boxes] == [0, 32768, 65536, 98304]
    assert [b.coords for b in boxes] == [(0, 0), (0, 256), (64, 0), (64, 256)]
    assert all(b.box_dims == (64, 256) and b.nbytes == 32768 for b in boxes)
    assert sum(b.nbytes for b in boxes) == big.tx_bytes == 512 * 128 * 2
    odd = choose_shared_layout(dtypes.bfloat16, 264, 64)  # 264 = 3 boxes of 88 rows
    assert (odd.row_boxes, odd.box_rows) == (3, 88)


def test_physical_offset_known_values():
    layout = choose_shared_layout(dtypes.bfloat16, 64, 64)
    # 128B: 16-B chunk c of row r lands at chunk c ^ (r & 7) (HF §2).
    assert physical_offset(layout, 0, 0) == 0
    assert physical_offset(layout, 1, 0) == 128 + 16
    assert physical_offset(layout, 1, 8) == 128
    assert physical_offset(layout, 7, 63) == 7 * 128 + ((7 ^ 7) * 16) + 14
    assert physical_offset(layout, 9, 0) == 9 * 128 + 16
    rows, cols = np.indices((64, 64))
    offsets = physical_offset(layout, rows, cols)
    assert offsets.shape == (64, 64)
    assert np.array_equal(np.sort(offsets.ravel()), np.arange(0, 64 * 64 * 2, 2))  # a permutation
    sw64 = choose_shared_layout(dtypes.bfloat16, 64, 64, swizzle=64)
    assert physical_offset(sw64, 2, 0) == 128 + 16  # 64-B rows: bits 7-8 = row // 2
    assert physical_offset(sw64, 0, 32) == 4096  # second box
    with pytest.raises(IndexError):
        physical_offset(layout, 64, 0)


def test_layout_errors_name_the_shape():
    with pytest.raises(ValueError, match=r"\[64, 12\].*multiple of 16"):
        choose_shared_layout(dtypes.bfloat16, 64, 12)
    with pytest.raises(ValueError, match=r"\[128, 32\].*128B swizzle.*multiple of 128"):
        choose_shared_layout(dtypes.bfloat16, 128, 32, swizzle=128)
    with pytest.raises(ValueError, match=r"\[300, 64\].*256"):
        choose_shared_layout(dtypes.bfloat16, 300, 64)
    with pytest.raises(ValueError, match=r"\[64, 64\]"):
        choose_shared_layout(dtypes.bfloat16, 64, 64, swizzle=16)
    layout = choose_shared_layout(dtypes.bfloat16, 64, 64)
    with pytest.raises(ValueError, match="aligned"):
        wgmma_descriptor(layout, 0x200, "K", 0)
    with pytest.raises(ValueError, match="k_step"):
        wgmma_descriptor(layout, 0, "K", 4)
    with pytest.raises(ValueError, match="multiple of 8"):
        wgmma_subtile_descriptor(layout, 0, "K", 0, 4)
    with pytest.raises(ValueError, match="16-bit"):
        wgmma_descriptor(choose_shared_layout(dtypes.float8_e4m3, 32, 128), 0, "MN", 0)
    with pytest.raises(ValueError, match="operand_major"):
        wgmma_descriptor(layout, 0, "M", 0)


def test_values_roundtrip_through_smem():
    rng = np.random.default_rng(1)
    for dtype in (dtypes.bfloat16, dtypes.float16, dtypes.float8_e4m3, dtypes.float8_e5m2, dtypes.float32):
        values = dtypes.round_to(dtype, rng.standard_normal((64, 64)) * 4)
        bits = bits_of(values, dtype)
        assert bits.dtype == BITS[dtype.nbytes]
        np.testing.assert_array_equal(values_of(bits, dtype), values)
        layout = choose_shared_layout(dtype, 64, 64)
        smem = np.zeros(layout.nbytes + 1024, dtype=np.uint8)
        tma_write_tile(smem, layout, 1024, bits)
        kper = wgmma_k_per_step(dtype)
        desc = wgmma_descriptor(layout, 1024, "K", 1)
        got = wgmma_read_operand(smem, desc, 64, kper, dtype, "K", decode=True)
        np.testing.assert_array_equal(got, values[:, kper : 2 * kper])
    with pytest.raises(ValueError, match="representable"):
        bits_of(np.array([0.3], dtype=np.float32), dtypes.float8_e4m3)
