"""Shared-memory tile layouts as TMA writes them, and the WGMMA descriptors that read them back.

References in comments are to docs/hardware.md ("HF §2" = TMA, "HF §3" = WGMMA) and to the PTX ISA
("PTX 9.7.15.5.1.2" = wgmma shared-memory matrix layout, canonical layouts and matrix descriptor).

Model used throughout
---------------------
A tile ``[rows, cols]`` (``cols`` contiguous in global memory) is loaded by one or more TMA boxes. Each box is
``box_rows x box_cols`` elements and TMA packs its rows densely, ``row_bytes = box_cols * elem`` bytes each, then
applies the swizzle ``o ^ (((o >> 7) & (span/16 - 1)) << 4)`` to the byte offset ``o`` inside the box (HF §2
"Swizzle mapping"). The hardware actually swizzles on the *absolute* shared address (HF §2 "The pattern follows
the absolute shared address"), so every box is placed at a multiple of the pattern repeat ``8 * span`` bytes and
the whole tile base must be aligned to :attr:`SharedTileLayout.alignment`; then box-relative and absolute swizzles
agree and the WGMMA descriptor base offset is 0.

* Swizzled modes (128/64/32 B): ``row_bytes == span`` — a box row is exactly one swizzle row, which is what the
  K-major and MN-major swizzled canonical layouts expect (PTX 9.7.15.5.1.2.1.3).
* No swizzle: boxes are 16 B wide, so that 8 consecutive rows form one contiguous 8 x 16 B "core matrix" (128 B),
  the unit of the no-swizzle canonical layouts (HF §3 LBO/SBO table, row "K-major none").

Boxes along the inner dimension ("column boxes") are stored one after another; when ``rows > 256`` (TMA's limit
on ``boxDim``, HF §2) each column box is split into ``row_boxes`` boxes of ``box_rows`` rows stored contiguously,
so a column box is always ``rows * row_bytes`` bytes of densely packed rows no matter how many TMA copies fill it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from warpspec.dtypes import DType
from warpspec.target import SM90A

__all__ = [
    "SWIZZLE_MODES",
    "SharedTileLayout",
    "Box",
    "DescriptorFields",
    "choose_shared_layout",
    "physical_offset",
    "swizzle_offset",
    "tma_boxes",
    "tma_box_bytes",
    "tma_write_tile",
    "read_tile",
    "make_descriptor",
    "decode_descriptor",
    "wgmma_k_per_step",
    "wgmma_k_steps",
    "wgmma_descriptor",
    "wgmma_subtile_descriptor",
    "wgmma_read_operand",
    "bits_of",
    "values_of",
]

#: Swizzle widths in bytes, widest first (0 = no swizzle).
SWIZZLE_MODES = (128, 64, 32, 0)

# Descriptor layout codes, bits 62-63 (HF §3 descriptor table: 1 = 128B, 2 = 64B, 3 = 32B, 0 = none; note TMA's
# enum runs the other way, HF §2 "swizzle").
_LAYOUT_CODE = {128: 1, 64: 2, 32: 3, 0: 0}
_SWIZZLE_OF_CODE = {code: sw for sw, code in _LAYOUT_CODE.items()}

# TMA boxDim[i] is in [1, 256] (HF §2).
_MAX_BOX_DIM = SM90A.tma_max_box_extent

# One wgmma instruction consumes 32 bytes of K per row: k16 for 16-bit, k32 for 8-bit, k8 for tf32 (HF §3 Shapes,
# "Advancing along K": bf16 k16 -> +32 B, fp8 k32 -> +32 B).
_K_STEP_BYTES = SM90A.wgmma_k_bytes


def _span(swizzle_bytes: int) -> int:
    """Width in bytes of one swizzle row; 16 B (one core-matrix row) for no swizzle."""
    return swizzle_bytes if swizzle_bytes else 16


def round_up(value: int, multiple: int) -> int:
    """``value`` rounded up to a multiple of ``multiple``."""
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class SharedTileLayout:
    """How one 2-D tile ``[rows, cols]`` of ``dtype`` lies in shared memory after TMA has loaded it.

    ``cols`` is the contiguous (inner) dimension in global memory. The tile is loaded as ``num_boxes`` column boxes
    of ``box_cols`` elements each (stored one after another, ``column_box_stride`` bytes apart), each split into
    ``row_boxes`` boxes of ``box_rows`` rows when ``rows > 256``. Build it with :func:`choose_shared_layout`.
    """

    dtype: DType
    rows: int
    cols: int
    swizzle_bytes: int
    box_cols: int
    num_boxes: int
    box_rows: int
    row_boxes: int = 1

    def __post_init__(self) -> None:
        shape = f"tile [{self.rows}, {self.cols}] of {self.dtype.name}"
        if self.swizzle_bytes not in SWIZZLE_MODES:
            raise ValueError(f"{shape}: swizzle_bytes must be one of {SWIZZLE_MODES}, got {self.swizzle_bytes}")
        if self.box_cols * self.num_boxes != self.cols:
            raise ValueError(f"{shape}: num_boxes * box_cols = {self.num_boxes} * {self.box_cols} != cols")
        if self.box_rows * self.row_boxes != self.rows:
            raise ValueError(f"{shape}: row_boxes * box_rows = {self.row_boxes} * {self.box_rows} != rows")
        if not 1 <= self.box_rows <= _MAX_BOX_DIM:
            raise ValueError(f"{shape}: box_rows {self.box_rows} outside TMA's boxDim range [1, 256]")
        if self.row_bytes != _span(self.swizzle_bytes):
            # Swizzled canonical layouts need box rows of exactly one swizzle span; no-swizzle ones 16-B core rows.
            raise ValueError(
                f"{shape}: box inner extent {self.row_bytes} B must equal {_span(self.swizzle_bytes)} B "
                f"for swizzle {self.swizzle_bytes}"
            )
        if self.row_boxes > 1 and self.box_rows % 8:
            # Row boxes are stored back to back; each must start on a pattern repeat (8 rows).
            raise ValueError(f"{shape}: box_rows {self.box_rows} must be a multiple of 8 when rows are split")

    @property
    def elem_bytes(self) -> int:
        """Size of one element in bytes."""
        return self.dtype.nbytes

    @property
    def span(self) -> int:
        """Bytes of one swizzle row (= swizzle_bytes), or 16 without swizzle."""
        return _span(self.swizzle_bytes)

    @property
    def row_bytes(self) -> int:
        """Bytes of one box row as TMA packs it (``box_cols * elem_bytes``)."""
        return self.box_cols * self.dtype.nbytes

    @property
    def inner_bytes(self) -> int:
        """Bytes of one full tile row in global memory (``cols * elem_bytes``)."""
        return self.cols * self.dtype.nbytes

    @property
    def alignment(self) -> int:
        """Required alignment of the tile base: the swizzle pattern repeat, 8 rows of ``span`` bytes.

        1024 for 128B, 512 for 64B, 256 for 32B (HF §2 "Swizzle mapping": pattern repeats) and 128 without swizzle
        (HF §2 "Destination alignment": 16 B faulted, 128 B worked).
        """
        return 8 * self.span

    @property
    def box_bytes(self) -> int:
        """Bytes one TMA box delivers (what complete_tx counts, HF §2 "Bytes")."""
        return self.box_rows * self.row_bytes

    @property
    def column_box_stride(self) -> int:
        """Distance in bytes between consecutive column boxes (rows*row_bytes rounded up to the alignment)."""
        # Rounded so each column box starts on a pattern repeat (the swizzle follows absolute addresses, HF §2).
        return round_up(self.rows * self.row_bytes, self.alignment)

    @property
    def nbytes(self) -> int:
        """Shared-memory footprint of the tile in bytes (including alignment padding between column boxes)."""
        return self.num_boxes * self.column_box_stride

    @property
    def tx_bytes(self) -> int:
        """Total bytes all TMA boxes of the tile deliver: the ``expect_tx`` count for one load of the tile."""
        return self.num_boxes * self.row_boxes * self.box_bytes


def choose_shared_layout(dtype: DType, rows: int, cols: int, swizzle: int | None = None) -> SharedTileLayout:
    """Choose the shared-memory layout TMA should write for a ``[rows, cols]`` tile of ``dtype``.

    Picks the widest swizzle whose span divides the tile's inner byte extent ``cols * dtype.nbytes``: a multiple of
    128 B gives 128B swizzle with 128-B boxes, else 64 B -> 64B, 32 B -> 32B, else no swizzle with 16-B boxes
    (which needs the inner extent to be a multiple of 16 B: TMA's boxDim[0]*elemsize rule, HF §2).
    ``swizzle`` (128, 64, 32 or 0) forces a mode. Rows above 256 (TMA's boxDim limit) are split into
    ``row_boxes`` equal boxes whose row count is a multiple of 8.

    Raises ``ValueError`` naming the tile shape when the tile cannot be laid out that way.
    """
    shape = f"tile [{rows}, {cols}] of {dtype.name}"
    if rows < 1 or cols < 1:
        raise ValueError(f"{shape}: rows and cols must be positive")
    inner = cols * dtype.nbytes
    if inner % 16:
        raise ValueError(
            f"{shape}: inner extent {inner} B is not a multiple of 16 B "
            f"(TMA needs boxDim[0]*elemsize to be a multiple of 16 B; cols must be a multiple of "
            f"{max(1, 16 // dtype.nbytes)})"
        )
    if swizzle is None:
        swizzle = next(sw for sw in SWIZZLE_MODES if inner % _span(sw) == 0)
    elif swizzle not in SWIZZLE_MODES:
        raise ValueError(f"{shape}: swizzle must be one of {SWIZZLE_MODES}, got {swizzle}")
    span = _span(swizzle)
    if inner % span:
        # A narrower box with a wider swizzle is legal for TMA but packs rows densely (HF §2), so rows would not be
        # the span-wide swizzle rows that WGMMA's canonical layouts read.
        raise ValueError(
            f"{shape}: {swizzle}B swizzle needs the inner extent ({inner} B) to be a multiple of {span} B"
        )
    if span % dtype.nbytes:
        raise ValueError(f"{shape}: element of {dtype.nbytes} B does not fit a {span}-B box row")
    box_cols = span // dtype.nbytes

    if rows <= _MAX_BOX_DIM:
        box_rows, row_boxes = rows, 1
    else:
        for row_boxes in range(-(-rows // _MAX_BOX_DIM), rows + 1):
            if rows % row_boxes == 0 and (rows // row_boxes) % 8 == 0 and rows // row_boxes <= _MAX_BOX_DIM:
                break
        else:
            raise ValueError(
                f"{shape}: rows > 256 must split into equal TMA boxes of at most 256 rows, each a multiple of 8 "
                f"(rows must be a multiple of 8)"
            )
        box_rows = rows // row_boxes
    return SharedTileLayout(
        dtype=dtype,
        rows=rows,
        cols=cols,
        swizzle_bytes=swizzle,
        box_cols=box_cols,
        num_boxes=inner // span,
        box_rows=box_rows,
        row_boxes=row_boxes,
    )


def swizzle_offset(offset, swizzle_bytes: int):
    """Apply the TMA/WGMMA swizzle to byte offset(s): ``o ^ (((o >> 7) & (span/16 - 1)) << 4)`` (HF §2).

    Works on ints and numpy integer arrays. ``swizzle_bytes`` 0 is the identity. The result equals the physical
    placement only when ``offset`` is measured from an address aligned to the pattern repeat (or is absolute).
    """
    mask = _span(swizzle_bytes) // 16 - 1
    return offset ^ (((offset >> 7) & mask) << 4)


def physical_offset(layout: SharedTileLayout, row, col):
    """Byte offset inside the tile where TMA puts element ``(row, col)``; vectorised over numpy arrays.

    Column box ``col // box_cols`` starts at ``column_box_stride`` multiples; inside it rows are dense
    ``row_bytes`` apart (row boxes are contiguous), and the swizzle of HF §2 is applied to the in-box offset.
    Assumes the tile base is aligned to ``layout.alignment`` so the in-box offset and absolute address swizzle alike.
    """
    row = np.asarray(row, dtype=np.int64)
    col = np.asarray(col, dtype=np.int64)
    if np.any((row < 0) | (row >= layout.rows) | (col < 0) | (col >= layout.cols)):
        raise IndexError(f"element index outside tile [{layout.rows}, {layout.cols}]")
    box, inner_col = np.divmod(col, layout.box_cols)
    in_box = row * layout.row_bytes + inner_col * layout.elem_bytes
    result = box * layout.column_box_stride + swizzle_offset(in_box, layout.swizzle_bytes)
    return int(result) if result.ndim == 0 else result


class Box(NamedTuple):
    """One TMA copy: where it lands in the tile and which part of the global tile it brings.

    ``smem_offset``: byte offset from the tile base. ``box_dims``: ``(box_cols, box_rows)``, innermost first (the
    tensor map's boxDim). ``coords``: ``(col_offset, row_offset)`` in elements relative to the tile origin,
    innermost first like the PTX coordinate operands (HF §2). ``nbytes``: bytes it delivers.
    """

    smem_offset: int
    box_dims: tuple[int, int]
    coords: tuple[int, int]
    nbytes: int


def tma_boxes(layout: SharedTileLayout) -> list[Box]:
    """The TMA copies that load one tile, column box by column box, row box by row box inside each."""
    boxes = []
    for cb in range(layout.num_boxes):
        for rb in range(layout.row_boxes):
            boxes.append(
                Box(
                    smem_offset=cb * layout.column_box_stride + rb * layout.box_rows * layout.row_bytes,
                    box_dims=(layout.box_cols, layout.box_rows),
                    coords=(cb * layout.box_cols, rb * layout.box_rows),
                    nbytes=layout.box_bytes,
                )
            )
    return boxes


def tma_box_bytes(layout: SharedTileLayout) -> int:
    """Bytes delivered by one TMA box of this layout (``box_rows * box_cols * elem``), counted by complete_tx."""
    return layout.box_bytes


# ----------------------------------------------------------------------------------------------------------------
# Raw element bits <-> values (TMA and WGMMA move bits, HF §2 "TMA moves bits").

_BITS_DTYPE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits_of(values, dtype: DType) -> np.ndarray:
    """Raw bit patterns (uint8/16/32/64) of ``values``: an array of ``dtype.numpy``, or numbers ``dtype`` holds
    exactly (anything else raises ValueError rather than being rounded here; see ``warpspec.dtypes.round_to``)."""
    values = np.asarray(values)
    array = np.ascontiguousarray(values, dtype=dtype.numpy)
    if values.dtype != array.dtype:
        exact = array.astype(np.float64) == values.astype(np.float64)
        exact |= np.isnan(array.astype(np.float64)) & np.isnan(values.astype(np.float64))
        if not exact.all():
            raise ValueError(f"{str(values[~exact].flat[0])} is not exactly representable as {dtype.name}")
    return array.view(_BITS_DTYPE[dtype.nbytes])


def values_of(bits, dtype: DType) -> np.ndarray:
    """An array of ``dtype.numpy`` holding the raw bit patterns ``bits`` (inverse of :func:`bits_of`)."""
    return np.ascontiguousarray(bits, dtype=_BITS_DTYPE[dtype.nbytes]).view(dtype.numpy)


def _as_bytes(bits: np.ndarray, nbytes: int) -> np.ndarray:
    """[..., nbytes] little-endian bytes of raw bit patterns."""
    return np.ascontiguousarray(bits, dtype=_BITS_DTYPE[nbytes]).view(np.uint8).reshape(*bits.shape, nbytes)


def _from_bytes(byte_array: np.ndarray, nbytes: int) -> np.ndarray:
    """Raw bit patterns from [..., nbytes] little-endian bytes."""
    return np.ascontiguousarray(byte_array, dtype=np.uint8).view(_BITS_DTYPE[nbytes])[..., 0]


def tma_write_tile(smem: np.ndarray, layout: SharedTileLayout, base: int, tile_bits: np.ndarray) -> None:
    """Model a TMA load of a whole tile: write raw element bits ``tile_bits[rows, cols]`` into ``smem`` (uint8).

    ``base`` is the tile's shared byte address (must be aligned to ``layout.alignment``). Use :func:`bits_of` to
    get raw bits from values.
    """
    _check_base(layout, base)
    tile_bits = np.asarray(tile_bits)
    if tile_bits.shape != (layout.rows, layout.cols):
        raise ValueError(f"tile_bits has shape {tile_bits.shape}, layout is [{layout.rows}, {layout.cols}]")
    r, c = np.indices(tile_bits.shape)
    offsets = base + physical_offset(layout, r, c)
    byte_idx = offsets[..., None] + np.arange(layout.elem_bytes)
    smem[byte_idx] = _as_bytes(tile_bits, layout.elem_bytes)


def read_tile(smem: np.ndarray, layout: SharedTileLayout, base: int) -> np.ndarray:
    """Raw element bits ``[rows, cols]`` of the tile stored at ``base`` (inverse of :func:`tma_write_tile`)."""
    _check_base(layout, base)
    r, c = np.indices((layout.rows, layout.cols))
    offsets = base + physical_offset(layout, r, c)
    return _from_bytes(smem[offsets[..., None] + np.arange(layout.elem_bytes)], layout.elem_bytes)


def _check_base(layout: SharedTileLayout, base: int) -> None:
    if base % layout.alignment:
        # Swizzle follows absolute address bits; an unaligned base changes the pattern (HF §2) and would need a
        # non-zero descriptor base_offset, which is untested (HF §7).
        raise ValueError(
            f"shared address {base:#x} is not aligned to {layout.alignment} B as {layout.swizzle_bytes}B swizzle needs"
        )


# ----------------------------------------------------------------------------------------------------------------
# WGMMA shared-memory matrix descriptors (HF §3 descriptor table; PTX 9.7.15.5.1.2.2).


class DescriptorFields(NamedTuple):
    """The decoded fields of a 64-bit WGMMA descriptor; ``start``/``lbo``/``sbo`` in bytes."""

    start: int
    lbo: int
    sbo: int
    base_offset: int
    swizzle_bytes: int


def make_descriptor(start: int, lbo: int, sbo: int, swizzle_bytes: int, base_offset: int = 0) -> int:
    """Encode a WGMMA shared-memory descriptor from byte quantities (HF §3 descriptor table).

    Bits 0-13 ``(start & 0x3FFFF) >> 4``, 16-29 ``lbo >> 4``, 32-45 ``sbo >> 4``, 49-51 base offset,
    62-63 layout code (1 = 128B, 2 = 64B, 3 = 32B, 0 = none). All other bits 0.
    """
    for name, value in (("start", start), ("lbo", lbo), ("sbo", sbo)):
        if value % 16:
            raise ValueError(f"descriptor {name} {value:#x} is not a multiple of 16 B")
    for name, value in (("lbo", lbo), ("sbo", sbo)):
        if not 0 <= value >> 4 < 1 << 14:
            raise ValueError(f"descriptor {name} {value} does not fit 14 bits after >> 4")
    if swizzle_bytes not in _LAYOUT_CODE:
        raise ValueError(f"swizzle_bytes must be one of {SWIZZLE_MODES}, got {swizzle_bytes}")
    if not 0 <= base_offset < 8:
        raise ValueError(f"base_offset {base_offset} does not fit 3 bits")
    return (
        ((start & 0x3FFFF) >> 4)
        | ((lbo >> 4) << 16)
        | ((sbo >> 4) << 32)
        | (base_offset << 49)
        | (_LAYOUT_CODE[swizzle_bytes] << 62)
    )


def decode_descriptor(descriptor: int) -> DescriptorFields:
    """Decode a 64-bit WGMMA descriptor into byte quantities (inverse of :func:`make_descriptor`)."""
    return DescriptorFields(
        start=(descriptor & 0x3FFF) << 4,
        lbo=((descriptor >> 16) & 0x3FFF) << 4,
        sbo=((descriptor >> 32) & 0x3FFF) << 4,
        base_offset=(descriptor >> 49) & 0x7,
        swizzle_bytes=_SWIZZLE_OF_CODE[(descriptor >> 62) & 0x3],
    )


def _check_major(operand_major: str) -> str:
    major = operand_major.upper()
    if major not in ("K", "MN"):
        raise ValueError(f"operand_major must be 'K' or 'MN', got {operand_major!r}")
    return major


def wgmma_k_per_step(dtype: DType) -> int:
    """K extent of one wgmma instruction in elements: 32 B of K (k16 for 16-bit, k32 for 8-bit, k8 for tf32)."""
    return _K_STEP_BYTES // dtype.nbytes


def wgmma_k_steps(layout: SharedTileLayout, operand_major: str) -> int:
    """How many wgmma k-steps the tile holds: K = cols for a K-major tile, K = rows for an MN-major tile."""
    major = _check_major(operand_major)
    k_per_step = wgmma_k_per_step(layout.dtype)
    k_extent = layout.cols if major == "K" else layout.rows
    return k_extent // k_per_step


def wgmma_descriptor(
    layout: SharedTileLayout, smem_address: int, operand_major: str, k_step: int, mn_offset: int = 0
) -> int:
    """The 64-bit WGMMA descriptor for the ``k_step``-th 32-byte K slice of a tile TMA loaded at ``smem_address``.

    ``operand_major`` "K": the tile is ``[M or N, K]`` (rows = M/N, cols = K, imm-trans = 0). "MN": the tile is
    ``[K, M or N]`` (rows = K, cols = M/N, imm-trans = 1; 16-bit types only, HF §3). ``mn_offset`` selects a
    sub-tile starting at that M/N index (a tile row for K-major, a tile column for MN-major), for splitting M across
    m64 instructions or N across several instructions. LBO/SBO follow the HF §3 table:

    ================  ==========================  ============================
    layout            LBO                         SBO
    ================  ==========================  ============================
    K-major swizzled  16 (unused, "assumed 1")    8 rows * span (1024/512/256)
    K-major none      column box stride           128 (next 8-row core)
    MN-major swizzled column box stride (atom)    8 k-rows * span
    MN-major none     128 (next 8 k-rows)         column box stride
    ================  ==========================  ============================
    """
    major = _check_major(operand_major)
    _check_base(layout, smem_address)
    shape = f"tile [{layout.rows}, {layout.cols}] of {layout.dtype.name}"
    steps = wgmma_k_steps(layout, major)
    if not 0 <= k_step < steps:
        raise ValueError(f"{shape}: k_step {k_step} outside [0, {steps}) for a {major}-major operand")
    span, stride = layout.span, layout.column_box_stride
    if major == "K":
        if layout.inner_bytes % _K_STEP_BYTES:
            raise ValueError(f"{shape}: K extent {layout.inner_bytes} B is not a multiple of 32 B (one k-step)")
        if mn_offset % 8 or not 0 <= mn_offset < layout.rows:
            raise ValueError(f"{shape}: row offset {mn_offset} must be a multiple of 8 inside the tile")
        kb = k_step * _K_STEP_BYTES
        # Past the swizzle width the next K bytes live in the next column box (HF §3 "Advancing along K"); inside a
        # swizzled row add the byte offset and let the hardware swizzle the absolute address (base_offset stays 0).
        start = smem_address + (kb // layout.row_bytes) * stride + kb % layout.row_bytes
        # Sub-tile rows: row r0 (multiple of 8) starts r0/8 atoms of 8*span bytes further = r0 * row_bytes.
        start += mn_offset * layout.row_bytes
        if layout.swizzle_bytes:
            lbo, sbo = 16, 8 * span
        else:
            # A k-step covers two 16-B column boxes; the second core matrix along K is one box further.
            lbo, sbo = stride, 128
    else:
        if layout.elem_bytes != 2:
            raise ValueError(f"{shape}: MN-major operands exist only for 16-bit types (HF §3 imm-trans)")
        if layout.rows % 16:
            raise ValueError(f"{shape}: MN-major K extent (rows) must be a multiple of 16")
        if mn_offset % layout.box_cols or not 0 <= mn_offset < layout.cols:
            raise ValueError(
                f"{shape}: MN offset {mn_offset} must be a multiple of the atom width {layout.box_cols} inside the tile"
            )
        # +16 k-rows of row_bytes per k16 step (HF §3 "MN-major: +16 rows x span bytes per k16").
        start = smem_address + k_step * wgmma_k_per_step(layout.dtype) * layout.row_bytes
        start += (mn_offset // layout.box_cols) * stride
        if layout.swizzle_bytes:
            lbo, sbo = stride, 8 * span
        else:
            lbo, sbo = 128, stride
    return make_descriptor(start, lbo, sbo, layout.swizzle_bytes)


def wgmma_subtile_descriptor(
    layout: SharedTileLayout, smem_address: int, operand_major: str, k_step: int, mn_offset: int
) -> int:
    """Descriptor of the sub-tile starting at M/N index ``mn_offset`` (row r0 of a K-major tile, column of an
    MN-major one); same as ``wgmma_descriptor(..., mn_offset=mn_offset)``.

    K-major: r0 must be a multiple of 8; the start moves by ``r0 * row_bytes`` (r0/8 atoms of 8 rows x span).
    MN-major: the offset must be a whole number of swizzle atoms (``box_cols``); the start moves by whole boxes.
    """
    return wgmma_descriptor(layout, smem_address, operand_major, k_step, mn_offset=mn_offset)


def wgmma_read_operand(
    smem: np.ndarray,
    descriptor: int,
    rows: int,
    k: int,
    dtype: DType,
    operand_major: str,
    *,
    decode: bool = False,
) -> np.ndarray:
    """Model of what WGMMA reads through ``descriptor``: the ``[rows, k]`` operand (rows = M or N), as raw bits.

    Implements the canonical layouts of PTX 9.7.15.5.1.2.1.3 (T = 16 B / elem elements, core matrices of 8 rows x
    16 B), with byte address of element (r, kk) before swizzling:

    * K-major swizzled: ``start + (r%8)*span + (r//8)*SBO + kk*elem`` (LBO unused)
    * K-major none:     ``start + (r%8)*16 + (r//8)*SBO + (kb//16)*LBO + kb%16`` with ``kb = kk*elem``
    * MN-major swizzled: ``start + nb%span + (nb//span)*LBO + (kk%8)*span + (kk//8)*SBO`` with ``nb = r*elem``
    * MN-major none:    ``start + nb%16 + (nb//16)*SBO + (kk%8)*16 + (kk//8)*LBO``

    then the swizzle ``a ^ (((a >> 7) & (span/16 - 1)) << 4)`` is applied to the absolute address (HF §2/§3).
    Returns raw bit patterns (uint8/uint16/uint32) of shape [rows, k], or values in ``dtype.numpy`` storage with
    ``decode=True``. Only ``base_offset == 0`` is modelled (non-zero is untested on hardware, HF §7).
    """
    major = _check_major(operand_major)
    fields = decode_descriptor(descriptor)
    if fields.base_offset:
        raise NotImplementedError("descriptor base_offset != 0 is not modelled (untested on hardware, HF §7)")
    elem = dtype.nbytes
    span = _span(fields.swizzle_bytes)
    r, kk = np.indices((rows, k), dtype=np.int64)
    if major == "K":
        kb = kk * elem
        if fields.swizzle_bytes:
            addr = fields.start + (r % 8) * span + (r // 8) * fields.sbo + kb
        else:
            addr = fields.start + (r % 8) * 16 + (r // 8) * fields.sbo + (kb // 16) * fields.lbo + kb % 16
    else:
        nb = r * elem
        if fields.swizzle_bytes:
            addr = fields.start + nb % span + (nb // span) * fields.lbo + (kk % 8) * span + (kk // 8) * fields.sbo
        else:
            addr = fields.start + nb % 16 + (nb // 16) * fields.sbo + (kk % 8) * 16 + (kk // 8) * fields.lbo
    phys = swizzle_offset(addr, fields.swizzle_bytes)
    if phys.size and (phys.min() < 0 or phys.max() + elem > smem.size):
        raise IndexError(f"descriptor reads bytes [{phys.min()}, {phys.max() + elem}) outside smem of {smem.size} B")
    bits = _from_bytes(smem[phys[..., None] + np.arange(elem)], elem)
    return values_of(bits, dtype) if decode else bits
