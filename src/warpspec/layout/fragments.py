"""Register fragments of WGMMA: which tile element each thread's register holds.

Formulas are docs/hardware.md §3 "Fragments" (GPU-verified for m64n64k16; N-generic per PTX 9.7.15.5.1.1 and CUTLASS
``CLayout_64xN`` / ``ALayout_64x16``). Thread ``t`` of a warpgroup (0..127) has warp ``w = t // 32``, lane
``l = t % 32``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "WARPGROUP_THREADS",
    "MAX_INSTR_N",
    "accumulator_fragment",
    "AccumulatorLayout",
    "a_register_fragment",
]

#: Threads in one warpgroup (4 consecutive warps, HF §3 "Warpgroup").
WARPGROUP_THREADS = 128
#: Largest N of one wgmma instruction (N = 8..256 step 8, HF §3 "Shapes").
MAX_INSTR_N = 256


def _check_instr_n(n: int) -> None:
    if n % 8 or not 8 <= n <= MAX_INSTR_N:
        raise ValueError(f"accumulator shape [64, {n}]: wgmma N must be a multiple of 8 in [8, 256]")


def accumulator_fragment(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)``, each int64 ``[128, n // 2]``: the element of the m64nNk16 f32 accumulator in register i of
    thread t.

    ``row = 16*w + l/4 + 8*((i>>1)&1)``, ``col = 8*(i>>2) + 2*(l&3) + (i&1)`` (HF §3 "Fragments"; f32 D uses N/2
    registers per thread, HF §3 "Shapes").
    """
    _check_instr_n(n)
    t = np.arange(WARPGROUP_THREADS, dtype=np.int64)[:, None]
    i = np.arange(n // 2, dtype=np.int64)[None, :]
    w, lane = t // 32, t % 32
    rows = 16 * w + lane // 4 + 8 * ((i >> 1) & 1)
    cols = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1)
    return np.broadcast_to(rows, (WARPGROUP_THREADS, n // 2)).copy(), np.broadcast_to(
        cols, (WARPGROUP_THREADS, n // 2)
    ).copy()


def _largest_instr_n(n: int) -> int:
    """Largest multiple of 8 that is <= 256 and divides n (n itself is a multiple of 8, so 8 always qualifies)."""
    return next(c for c in range(min(n, MAX_INSTR_N), 7, -8) if n % c == 0)


@dataclass(frozen=True)
class AccumulatorLayout:
    """An f32 ``[m, n]`` accumulator tile spread over ``warpgroups`` warpgroups' registers.

    Warpgroup g owns rows ``[g*m/warpgroups, (g+1)*m/warpgroups)`` in blocks of 64 (one m64 instruction each);
    along N the tile is covered by ``n // instr_n`` instructions of ``instr_n`` columns (``instr_n = n`` when
    ``n <= 256``, else the largest multiple of 8 <= 256 dividing n). Register order in a thread:
    ``reg = (m_block * n_instrs + n_instr) * (instr_n // 2) + i`` where i is the register of the single-instruction
    fragment (:func:`accumulator_fragment`). Threads are numbered ``128*g + t``.
    """

    m: int
    n: int
    warpgroups: int = 1
    instr_n: int | None = field(default=None)

    def __post_init__(self) -> None:
        shape = f"accumulator [{self.m}, {self.n}] over {self.warpgroups} warpgroup(s)"
        if self.warpgroups < 1:
            raise ValueError(f"{shape}: warpgroups must be >= 1")
        if self.m < 1 or self.m % self.warpgroups or (self.m // self.warpgroups) % 64:
            raise ValueError(f"{shape}: m / warpgroups must be a positive multiple of 64 (wgmma M = 64)")
        if self.n < 8 or self.n % 8:
            raise ValueError(f"{shape}: n must be a positive multiple of 8 (wgmma N step)")
        instr_n = _largest_instr_n(self.n) if self.instr_n is None else self.instr_n
        if instr_n % 8 or not 8 <= instr_n <= MAX_INSTR_N or self.n % instr_n:
            raise ValueError(f"{shape}: instr_n {instr_n} must be a multiple of 8 in [8, 256] dividing n")
        object.__setattr__(self, "instr_n", instr_n)

    @property
    def threads(self) -> int:
        """Threads holding the tile (128 per warpgroup)."""
        return WARPGROUP_THREADS * self.warpgroups

    @property
    def m_blocks(self) -> int:
        """m64 row blocks per warpgroup."""
        return self.m // self.warpgroups // 64

    @property
    def n_instructions(self) -> int:
        """wgmma instructions along N per m64 block."""
        return self.n // self.instr_n

    def registers_per_thread(self) -> int:
        """f32 registers each thread holds: ``(m / warpgroups / 64) * (n / 2)``."""
        return self.m_blocks * self.n // 2

    def element_of(self, thread, reg) -> tuple[np.ndarray, np.ndarray]:
        """``(row, col)`` of the tile element in register ``reg`` of ``thread``; vectorised (numpy broadcasting)."""
        thread = np.asarray(thread, dtype=np.int64)
        reg = np.asarray(reg, dtype=np.int64)
        if np.any((thread < 0) | (thread >= self.threads)):
            raise IndexError(f"thread outside [0, {self.threads})")
        if np.any((reg < 0) | (reg >= self.registers_per_thread())):
            raise IndexError(f"register outside [0, {self.registers_per_thread()})")
        group, t = np.divmod(thread, WARPGROUP_THREADS)
        block, i = np.divmod(reg, self.instr_n // 2)
        m_block, n_instr = np.divmod(block, self.n_instructions)
        w, lane = t // 32, t % 32
        # Single-instruction fragment (HF §3), then shifted to the instruction's place in the tile.
        row = 16 * w + lane // 4 + 8 * ((i >> 1) & 1)
        col = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1)
        row = row + group * (self.m // self.warpgroups) + m_block * 64
        col = col + n_instr * self.instr_n
        return row, col

    def _index(self) -> tuple[np.ndarray, np.ndarray]:
        t = np.arange(self.threads)[:, None]
        r = np.arange(self.registers_per_thread())[None, :]
        return self.element_of(t, r)

    def gather(self, tile: np.ndarray) -> np.ndarray:
        """Registers ``[threads, registers_per_thread]`` holding ``tile[m, n]`` (what each thread would own)."""
        tile = np.asarray(tile)
        if tile.shape != (self.m, self.n):
            raise ValueError(f"tile has shape {tile.shape}, accumulator layout is [{self.m}, {self.n}]")
        rows, cols = self._index()
        return tile[rows, cols]

    def scatter(self, regs: np.ndarray) -> np.ndarray:
        """The ``[m, n]`` tile from registers ``[threads, registers_per_thread]`` (inverse of :meth:`gather`)."""
        regs = np.asarray(regs)
        expected = (self.threads, self.registers_per_thread())
        if regs.shape != expected:
            raise ValueError(f"registers have shape {regs.shape}, expected {expected}")
        rows, cols = self._index()
        tile = np.zeros((self.m, self.n), dtype=regs.dtype)
        tile[rows, cols] = regs
        return tile


def a_register_fragment(per_element: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Where the A operand of a register-sourced (RS) m64nNk16 wgmma (f16/bf16) lives in a warpgroup's registers.

    Returns ``(rows, ks)``, int64 ``[128, 4]``: b32 register j of thread t packs ``(A[row][k], A[row][k+1])``, low
    half first, with ``row = 16*w + l/4 + 8*(j&1)``, ``k = 2*(l&3) + 8*(j>>1)`` (HF §3 "Fragments").
    With ``per_element=True`` returns ``[128, 8]`` arrays for the 16-bit halves ``e = 2*j + h`` (k + h).
    """
    t = np.arange(WARPGROUP_THREADS, dtype=np.int64)[:, None]
    j = np.arange(4, dtype=np.int64)[None, :]
    w, lane = t // 32, t % 32
    rows = np.broadcast_to(16 * w + lane // 4 + 8 * (j & 1), (WARPGROUP_THREADS, 4))
    ks = np.broadcast_to(2 * (lane & 3) + 8 * (j >> 1), (WARPGROUP_THREADS, 4))
    if per_element:
        return np.repeat(rows, 2, axis=1), np.repeat(ks, 2, axis=1) + np.tile([0, 1], 4)[None, :]
    return rows.copy(), ks.copy()
