"""The hardware a kernel is checked and compiled for, as data: limits, thread organisation and the WGMMA forms.

Every check that depends on the chip reads it from a ``Target``: the front end (instruction shapes and dtypes),
the layout and shared-memory passes, the emulator and the CUDA back end. A new dtype form is a row of
``WGMMA_FORMS``; a new chip is a new ``Target``.
"""

from __future__ import annotations

from dataclasses import dataclass

from warpspec.dtypes import DType, bfloat16, float8_e4m3, float8_e5m2, float16, float32


@dataclass(frozen=True)
class WgmmaForm:
    """One ``wgmma.mma_async`` form: A and B element types, the accumulator types it may write, its K per
    instruction, and which operand majors it reads.

    ``transposable``: the operands may be MN-major in shared memory (``imm-trans-a/b``); otherwise both must be
    K-major (a ``[M, K]`` A and a B given as the transposed view of an ``[N, K]`` tile).
    ``register_a``: A may come from registers (the ``RS`` form) with the fragment layout warpspec implements.
    """

    a: DType
    b: DType
    accumulators: tuple[DType, ...]
    k: int
    ptx_type: str  # the PTX spelling of A's and B's type: f16, bf16, e4m3, e5m2
    transposable: bool
    register_a: bool

    def describe(self) -> str:
        """``m64nNk16.f32.f16.f16`` style name of the form, N left symbolic."""
        accs = "/".join(_PTX_ACC[d.name] for d in self.accumulators)
        return f"m64nNk{self.k}.{{{accs}}}.{self.ptx_type}.{self.ptx_type}"


_PTX_ACC = {"float32": "f32", "float16": "f16"}

#: The WGMMA forms warpspec emits: PTX ISA 9.7.15.2 (shapes) and 9.7.15.5.2 (operand rules). A and B have the
#: same type in each row (mixed e4m3 x e5m2 forms exist in PTX; add rows when a kernel needs them).
WGMMA_FORMS = (
    WgmmaForm(float16, float16, (float32, float16), 16, "f16", transposable=True, register_a=True),
    WgmmaForm(bfloat16, bfloat16, (float32,), 16, "bf16", transposable=True, register_a=True),
    WgmmaForm(float8_e4m3, float8_e4m3, (float32, float16), 32, "e4m3", transposable=False, register_a=False),
    WgmmaForm(float8_e5m2, float8_e5m2, (float32, float16), 32, "e5m2", transposable=False, register_a=False),
)


@dataclass(frozen=True)
class Target:
    """Facts of one GPU architecture that kernels are checked against (docs/hardware.md holds the sources)."""

    name: str
    arch: str  # NVRTC/nvcc architecture option value
    warp_threads: int
    warpgroup_threads: int
    max_block_threads: int
    #: Opt-in dynamic shared memory per block, and what of it tiles and barriers may plan for: the generated code
    #: rounds the buffer's start up to ``shared_alignment`` bytes (swizzled TMA tiles need it) and keeps that reserve.
    shared_bytes_per_block: int
    shared_alignment: int
    named_barriers: int  # per block; id 0 is the block-wide barrier (__syncthreads)
    registers_per_block: int
    max_registers_per_thread: int
    max_cluster_blocks: int
    portable_cluster_blocks: int
    mbarrier_max_count: int  # expected arrivals per phase: [1, max]
    mbarrier_tx_limit: int  # |tx-count| bound
    tma_inner_box_multiple: int  # bytes: a TMA box's inner extent is a multiple of this
    tma_max_box_extent: int
    wgmma_m: int  # rows per warpgroup per instruction
    wgmma_n_step: int
    wgmma_max_n: int
    wgmma_k_bytes: int  # bytes of K per instruction (k16 x 2 B = k32 x 1 B)
    wgmma_forms: tuple[WgmmaForm, ...]

    def entry_registers(self, block_threads: int) -> int:
        """The registers each thread of a ``block_threads``-thread block starts with: the block's share of the SM's
        register file in allocation steps of 8 (``setmaxnreg``'s unit), at most the per-thread maximum."""
        return min(self.registers_per_block // block_threads // 8 * 8, self.max_registers_per_thread)

    @property
    def shared_limit(self) -> int:
        """Bytes of shared memory a block's tiles and mbarriers may plan for."""
        return self.shared_bytes_per_block - self.shared_alignment

    def wgmma_form(self, a: DType, b: DType) -> WgmmaForm | None:
        """The WGMMA form for A and B element types, or None when the chip has none."""
        for form in self.wgmma_forms:
            if form.a == a and form.b == b:
                return form
        return None


#: Hopper (H100/H200) with the architecture-specific features: ``wgmma`` and ``setmaxnreg`` need sm_90a.
SM90A = Target(
    name="sm90a", arch="sm_90a", warp_threads=32, warpgroup_threads=128, max_block_threads=1024,
    shared_bytes_per_block=232448, shared_alignment=1024, named_barriers=16, registers_per_block=65536,
    max_registers_per_thread=255, max_cluster_blocks=16, portable_cluster_blocks=8, mbarrier_max_count=2**20 - 1,
    mbarrier_tx_limit=2**20 - 1, tma_inner_box_multiple=16, tma_max_box_extent=256, wgmma_m=64, wgmma_n_step=8,
    wgmma_max_n=256, wgmma_k_bytes=32, wgmma_forms=WGMMA_FORMS,
)

#: The target kernels are built for. One today; a back end names the target its emitters are registered for.
DEFAULT = SM90A
