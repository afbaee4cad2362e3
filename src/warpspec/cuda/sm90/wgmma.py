"""sm_90a emission of the WGMMA family (``warpspec.isa.wgmma``): fence, commit, wait and ``wgmma.mma_async``
chains with shared-memory descriptors (or A fragments from registers), one instruction per (m64 block, N slice,
K step), the form taken from the target's table."""

from __future__ import annotations

from warpspec.cuda.contracts import CodeGenerator
from warpspec.isa.wgmma import WgmmaCommit, WgmmaFence, WgmmaMma, WgmmaWait
from warpspec.ir import nodes as ir
from warpspec.layout.fragments import AccumulatorLayout
from warpspec.layout.shared import SharedTileLayout, wgmma_descriptor
from warpspec.layout.registers import packed
from warpspec.isa.registry import emits
from warpspec.target import SM90A

TARGET = SM90A.name


@emits(WgmmaFence, TARGET)
def _emit_WgmmaFence(gen: CodeGenerator, s: WgmmaFence) -> None:
    gen.line('asm volatile("wgmma.fence.sync.aligned;" ::: "memory");')


@emits(WgmmaCommit, TARGET)
def _emit_WgmmaCommit(gen: CodeGenerator, s: WgmmaCommit) -> None:
    gen.line('asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");')


@emits(WgmmaWait, TARGET)
def _emit_WgmmaWait(gen: CodeGenerator, s: WgmmaWait) -> None:
    gen.line(f'asm volatile("wgmma.wait_group.sync.aligned {s.n};" ::: "memory");')
    if s.n == 0:
        _fence_accumulators(gen)


def _fence_accumulators(gen: CodeGenerator) -> None:
    """After ``wait_group(0)`` every WGMMA accumulator in scope holds its final values: pin each one's registers
    here with an empty asm that reads and writes them (CUTLASS's warpgroup_fence_operand), so no read of them
    below can be moved above the wait. The wait's asm names no register, and without the pin the compiler may
    hoist a read (a store's bit casts of a float32 accumulator) above it; ptxas then serializes every WGMMA of the
    kernel to stay correct (advisory C7514). After ``wait_group(N > 0)`` groups may still write them: no pin."""
    accumulators = {stmt.d.decl.uid: stmt.d.decl for stmt in ir.walk(gen.kernel.body) if isinstance(stmt, WgmmaMma)}
    for uid, decl in accumulators.items():
        if uid not in gen.declared:
            continue
        pairs = packed(decl)  # float16 accumulators live as pairs in 32-bit words
        count = gen.reg_layouts[uid].registers
        gen.line("#pragma unroll")
        gen.line(f'for (int i = 0; i < {(count + 1) // 2 if pairs else count}; ++i) '
                 f'asm volatile("" : "{"+r" if pairs else "+f"}"({gen.tensor_name(decl)}[i]) :: "memory");')


@emits(WgmmaMma, TARGET)
def _emit_WgmmaMma(gen: CodeGenerator, s: WgmmaMma) -> None:
    acc = gen.reg_layouts[s.d.decl.uid]
    layout: AccumulatorLayout = acc.layout
    b_place = gen.shared[s.b.decl.uid]
    b_major = "K" if s.b.transposed else "MN"  # b is [K, N]: stored [N, K] (a transposed view) is K-major
    form = gen.target.wgmma_form(s.a.dtype, s.b.dtype)  # the front end checked that the form exists
    k_total = s.a.shape[1]
    kind = form.ptx_type
    f16_acc = s.d.decl.dtype.name == "float16"
    d_kind = "f16" if f16_acc else "f32"
    rows_per_group = layout.m // layout.warpgroups
    d_name = gen.tensor_name(s.d.decl)
    instr_n = layout.instr_n
    # f32 D: one register per element; f16 D: pairs packed in 32-bit registers (PTX 9.7.15.5.1.1.1).
    regs = instr_n // 4 if f16_acc else instr_n // 2
    from_registers = s.a.kind == ir.REGISTER
    gen.line("{")
    gen.indent += 1
    if not from_registers:
        a_place = gen.shared[s.a.decl.uid]
        a_major = "MN" if s.a.transposed else "K"
        gen.line(f"const unsigned a_base_ = {gen.tile_address(s.a, s.loc)};")
        if layout.warpgroups > 1:
            per_group = _group_offset_bytes(gen, a_place.tile, a_major, rows_per_group)
            gen.line(f"const unsigned a_group_ = a_base_ + ((threadIdx.x - {acc.begin}u) / 128u) * {per_group}u;")
        else:
            gen.line("const unsigned a_group_ = a_base_;")
    gen.line(f"const unsigned b_base_ = {gen.tile_address(s.b, s.loc)};")
    a_name = gen.tensor_name(s.a.decl) if from_registers else None
    for mb in range(layout.m_blocks):
        for ni in range(layout.n_instructions):
            for kk in range(k_total // form.k):
                b_desc = wgmma_descriptor(b_place.tile, 0, b_major, kk, mn_offset=ni * instr_n)
                first = (mb * layout.n_instructions + ni) * (instr_n // 2)  # first element register
                d_regs = [f"{d_name}[{first // 2 + r}]" if f16_acc else f"{d_name}[{first + r}]"
                          for r in range(regs)]
                outs = ", ".join(f'"+{"r" if f16_acc else "f"}"({reg})' for reg in d_regs)
                d_list = ", ".join(f"%{r}" for r in range(regs))
                b_operand = f'"l"({b_desc}ull + (static_cast<u64>(b_base_ & 0x3FFFFu) >> 4))'
                if from_registers:
                    word = (mb * (k_total // form.k) + kk) * 4  # 8 elements = 4 packed words per block
                    a_text = "{" + ", ".join(f"%{regs + j}" for j in range(4)) + "}"
                    inputs = ", ".join(f'"r"({a_name}[{word + j}])' for j in range(4)) + f", {b_operand}"
                    b_index, scale_index = regs + 4, regs + 5
                    immediates = f"p, 1, 1, {1 if b_major == 'MN' else 0}"
                else:
                    a_desc = wgmma_descriptor(a_place.tile, 0, a_major, kk, mn_offset=mb * 64)
                    a_text = f"%{regs}"
                    inputs = f'"l"({a_desc}ull + (static_cast<u64>(a_group_ & 0x3FFFFu) >> 4)), {b_operand}'
                    b_index, scale_index = regs + 1, regs + 2
                    immediates = f"p, 1, 1, {1 if a_major == 'MN' else 0}, {1 if b_major == 'MN' else 0}" \
                        if form.transposable else "p, 1, 1"  # K-major-only forms take no transpose operands
                gen.line(
                    f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{scale_index}, 0;\\n'
                    f'wgmma.mma_async.sync.aligned.m64n{instr_n}k{form.k}.{d_kind}.{kind}.{kind} '
                    f'{{{d_list}}}, {a_text}, %{b_index}, {immediates};\\n}}\\n" : {outs} : {inputs}, "n"(1));')
    gen.indent -= 1
    gen.line("}")


def _group_offset_bytes(gen: CodeGenerator, tile: SharedTileLayout, major: str, rows_per_group: int) -> int:
    if major == "K":
        return rows_per_group * tile.row_bytes
    return (rows_per_group // tile.box_cols) * tile.column_box_stride
