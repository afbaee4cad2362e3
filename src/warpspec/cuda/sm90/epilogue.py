"""Stores of WGMMA accumulator tiles to global memory: each thread stores its fragment's column pairs, or
(16-bit tiles) the four lanes of a quad exchange pairs so each lane stores 16 contiguous bytes; float32 tiles
reduce-added (``store_global(..., reduce="add")``) add the same pairs atomically.

An element is stored when its row lies in ``[0, rows_end_)`` and its column in ``[0, size1)``, the view the emulator
clips to (a tile at negative offsets included). A column's bounds are one unsigned comparison, a negative index being
larger than any size; a row's are two signed ones, against an end that may itself be below 0 (clamping the end
instead, to compare unsigned, made ptxas serialize the grouped GEMM's WGMMAs: C7514)."""

from __future__ import annotations

from warpspec.cuda.contracts import CodeGenerator
from warpspec.cuda.cxx import C_TYPES, thread_prelude
from warpspec.isa.memory import StoreGlobal
from warpspec.layout.registers import Accumulator, packed


def _inside(index: str, end: str) -> str:
    """C++: whether ``index`` (an int) lies in ``[0, end)``, ``end`` being non-negative."""
    return f"static_cast<unsigned>({index}) < static_cast<unsigned>({end})"


def _store_head(gen: CodeGenerator, layout: Accumulator, view: str, row: str, col_expr: str,
                rows_end: str | None, cols_end: str | None) -> None:
    acc = layout.layout
    gen.line(thread_prelude(layout.begin))
    gen.line(f"const int rows_end_ = {rows_end or view + '_size0'};  // the first view row not to write")
    gen.line(f"const int cols_end_ = max({cols_end or view + '_size1'}, 0);  // and column (an unsigned bound below)")
    gen.line(f"const int row0_ = {row} + g_ * {acc.m // acc.warpgroups} + 16 * w_ + (lane_ >> 2);")
    gen.line(f"const int col0_ = {col_expr};")
    gen.line(f"unsigned char *const base_ = reinterpret_cast<unsigned char *>({view}_base);")


def store_pairs(gen: CodeGenerator, s: StoreGlobal, layout: Accumulator, view: str, row: str, col: str,
                rows_end: str | None = None, cols_end: str | None = None):
    """Each thread stores its fragment's adjacent column pairs (4 or 8 bytes) where aligned and in bounds, else
    element by element; with ``s.reduce`` (float32, "add") it adds them instead: ``red.global.add.v2.f32`` a pair,
    ``red.global.add.f32`` an element."""
    acc = layout.layout
    src = s.src.decl
    ctype = C_TYPES[src.dtype.name]
    nbytes = src.dtype.nbytes
    pair = "unsigned" if nbytes == 2 else "u64"
    # A 4-byte element's bits as an unsigned word: a float's through __float_as_uint, an integer's as they are
    # (__float_as_uint of an int would convert the value to float first).
    bits = (lambda e: f"__float_as_uint({e})") if src.dtype.is_float else (lambda e: f"static_cast<unsigned>({e})")

    def pair_write(offset: str, reg: int) -> str:
        first, second = gen.element(src, reg), gen.element(src, reg + 1)
        if s.reduce:
            return f"red_add_f32x2(base_ + {offset} * 4, {first}, {second});"
        if packed(src):
            both = f"{gen.tensor_name(src)}[{reg // 2}]"
        else:
            both = f"(static_cast<u64>({bits(first)}) | (static_cast<u64>({bits(second)}) << 32))"
        return f"*reinterpret_cast<{pair} *>(base_ + {offset} * {nbytes}) = {both};"

    def element_write(offset: str, reg: int) -> str:
        if s.reduce:
            return f"red_add_f32(base_ + {offset} * 4, {gen.element(src, reg)});"
        value = gen.element(src, reg)
        return f"*reinterpret_cast<{ctype} *>(base_ + {offset} * {nbytes}) = static_cast<{ctype}>({value});"

    gen.line("{")
    gen.indent += 1
    _store_head(gen, layout, view, row, f"{col} + 2 * (lane_ & 3)", rows_end, cols_end)
    gen.line(f"const bool pairs_ = ({view}_stride1 == 1) && (({view}_stride0 & 1) == 0) && "
              f"(({view}_base & {2 * nbytes - 1}) == 0) && ((({col}) & 1) == 0) && col0_ >= 0;")
    for mb in range(acc.m_blocks):
        for ni in range(acc.n_instructions):
            for j in range(acc.instr_n // 8):
                for h in range(2):
                    reg = (mb * acc.n_instructions + ni) * (acc.instr_n // 2) + 4 * j + 2 * h
                    gen.line(f"{{ const int r = row0_ + {mb * 64 + 8 * h}, c = col0_ + "
                              f"{ni * acc.instr_n + 8 * j};")
                    gen.line(f"  if (r >= 0 && r < rows_end_) {{ const long long e = static_cast<long long>(r) * "
                              f"{view}_stride0 + static_cast<long long>(c) * {view}_stride1;")
                    gen.line(f"    if (pairs_ && c + 1 < cols_end_) {pair_write('e', reg)}")
                    gen.line(f"    else {{ if ({_inside('c', 'cols_end_')}) {element_write('e', reg)} "
                              f"if ({_inside('c + 1', 'cols_end_')}) "
                              f"{element_write(f'(e + {view}_stride1)', reg + 1)} }} }} }}")
    gen.indent -= 1
    gen.line("}")


def store_quads(gen: CodeGenerator, s: StoreGlobal, layout: Accumulator, view: str, row: str, col: str,
                rows_end: str | None = None, cols_end: str | None = None):
    """16-bit tiles: the four lanes of a quad exchange column pairs through shuffles so each lane stores 8
    consecutive columns (16 bytes, whole 32-byte sectors per quad) instead of 4 bytes at a time."""
    acc = layout.layout
    src = s.src.decl
    name = gen.tensor_name(src)
    ctype = C_TYPES[src.dtype.name]
    gen.line("{")
    gen.indent += 1
    _store_head(gen, layout, view, row, f"{col} + 8 * (lane_ & 3)", rows_end, cols_end)
    gen.line("const int q_ = lane_ & 3;")
    gen.line(f"const bool vec_ = ({view}_stride1 == 1) && (({view}_stride0 & 7) == 0) && (({view}_base & 15) == 0)"
              f" && ((({col}) & 7) == 0) && col0_ >= 0;")
    for mb in range(acc.m_blocks):
        for ni in range(acc.n_instructions):
            for t in range(acc.instr_n // 32):
                for h in range(2):
                    reg = (mb * acc.n_instructions + ni) * (acc.instr_n // 2) + 16 * t + 2 * h
                    words = ", ".join(f"{name}[{(reg + 4 * k) // 2}]" for k in range(4))
                    gen.line("{")
                    gen.line(f"  const unsigned p_[4] = {{{words}}}; unsigned v_[4];")
                    gen.line("  // Lane q gathers chunk 4t+q: from quad lane (q+s)&3 the pair that lane holds.")
                    gen.line("  #pragma unroll")
                    gen.line("  for (int s = 0; s < 4; ++s) v_[s] = __shfl_sync(0xffffffffu, select4((q_ - s) & 3, "
                              "p_[0], p_[1], p_[2], p_[3]), (lane_ & ~3) | ((q_ + s) & 3));")
                    gen.line("  U4 out_;")
                    gen.line("  out_.x = select4((0 - q_) & 3, v_[0], v_[1], v_[2], v_[3]); "
                              "out_.y = select4((1 - q_) & 3, v_[0], v_[1], v_[2], v_[3]);")
                    gen.line("  out_.z = select4((2 - q_) & 3, v_[0], v_[1], v_[2], v_[3]); "
                              "out_.w = select4((3 - q_) & 3, v_[0], v_[1], v_[2], v_[3]);")
                    gen.line(f"  const int r = row0_ + {mb * 64 + 8 * h}, c = col0_ + {ni * acc.instr_n + 32 * t};")
                    gen.line(f"  if (r >= 0 && r < rows_end_) {{")
                    gen.line(f"    const long long e = static_cast<long long>(r) * {view}_stride0 + "
                              f"static_cast<long long>(c) * {view}_stride1;")
                    gen.line(f"    if (vec_ && c + 7 < cols_end_) *reinterpret_cast<U4 *>(base_ + e * 2) = out_;")
                    gen.line("    else {")
                    gen.line("      const unsigned w_out[4] = {out_.x, out_.y, out_.z, out_.w};")
                    gen.line("      #pragma unroll")
                    gen.line(f"      for (int i = 0; i < 8; ++i) if ({_inside('c + i', 'cols_end_')}) "
                              f"*reinterpret_cast<{ctype} *>(base_ + (e + i * {view}_stride1) * 2) = "
                              f"static_cast<{ctype}>(w_out[i >> 1] >> (16 * (i & 1)));")
                    gen.line("    }")
                    gen.line("  }")
                    gen.line("}")
    gen.indent -= 1
    gen.line("}")
