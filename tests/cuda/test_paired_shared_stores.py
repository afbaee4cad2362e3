"""``store_shared`` of WGMMA fragments (accumulators and register A operands) a column pair at a time: one 4-byte
store per packed 16-bit pair, one 8-byte store per float32 pair, instead of one store per element. The pairing is
right when a fragment's elements 2p and 2p + 1 are one row's columns c and c + 1 with c even (checked here on the
coordinate expressions the CUDA back end emits, for every thread) and the TMA swizzle keeps such a pair adjacent and
aligned in every tile layout (checked on ``physical_offset``, the layout the emulator and TMA share); the SASS of
the backward's dK/dV kernels then holds no 16-bit scalar shared store."""

import itertools

import pytest

from warpspec.dtypes import bfloat16, float16, float32
from warpspec.layout.fragments import AccumulatorLayout
from warpspec.layout.registers import Accumulator, AFragment
from warpspec.layout.shared import choose_shared_layout, physical_offset


def thread_coords(layout, threads):
    """(row, col) of every register of every thread, from the C expressions of ``layout.coords``."""
    for t in range(threads):
        names = {"g_": t >> 7, "w_": (t >> 5) & 3, "lane_": t & 31}
        yield [tuple(eval(expression, {}, names) for expression in layout.coords(i))
               for i in range(layout.registers)]


LAYOUTS = [Accumulator(AccumulatorLayout(m, n, warpgroups), 0)
           for m, n in [(64, 8), (64, 16), (64, 64), (64, 128), (64, 256), (128, 64), (128, 256)]
           for warpgroups in ([1, 2] if m == 128 else [1])] + \
          [AFragment(m, k, warpgroups, 0) for m, k in [(64, 16), (64, 64), (64, 128), (128, 64)]
           for warpgroups in ([1, 2] if m == 128 else [1])]


@pytest.mark.parametrize("layout", LAYOUTS, ids=repr)
def test_a_fragment_s_element_pairs_are_one_row_s_adjacent_columns(layout):
    threads = layout.owners[1]
    seen = set()
    for coords in thread_coords(layout, threads):
        for i in range(0, layout.registers, 2):
            (row, col), (row_next, col_next) = coords[i], coords[i + 1]
            assert (row_next, col_next) == (row, col + 1) and col % 2 == 0, (layout, i)
            seen |= {(row, col), (row, col + 1)}
    shape = (layout.layout.m, layout.layout.n) if isinstance(layout, Accumulator) else (layout.m, layout.k)
    assert len(seen) == shape[0] * shape[1]  # every element of the tile once


@pytest.mark.parametrize("dtype", [bfloat16, float16, float32], ids=lambda d: d.name)
@pytest.mark.parametrize("rows, cols", [(64, 8), (64, 32), (64, 64), (64, 128), (128, 64), (64, 256)])
def test_the_swizzle_keeps_an_even_column_pair_adjacent_and_aligned(dtype, rows, cols):
    layout = choose_shared_layout(dtype, rows, cols)
    for row, col in itertools.product(range(rows), range(0, cols, 2)):
        first = physical_offset(layout, row, col)
        assert physical_offset(layout, row, col + 1) == first + dtype.nbytes
        assert first % (2 * dtype.nbytes) == 0


def test_the_backward_s_fragments_reach_shared_memory_without_16_bit_stores():
    """dK and dV leave through shared memory (TMA stores); the accumulating kernel also stores its dSᵀ (a 16-bit
    register A operand) and its float32 dQ share there: paired, as 32-bit stores (STS) and 64-bit ones (STS.64)."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble
    from warpspec.ops.attention_backward_kernel import BackwardKV, BackwardKVDQ
    from warpspec.runtime import kernel_for

    for kernel in (BackwardKV, BackwardKVDQ):
        built = compile_kernel(kernel_for(kernel(bfloat16, head_dim=128, causal=False, block_m=64, num_stages=2), {}))
        counts = count_instructions(disassemble(built.module.cubin), ["STS.U16", "STS.64", "STS"])
        assert counts["STS.U16"] == 0 and counts["STS"] > 0, (kernel.__name__, counts)
        assert (counts["STS.64"] > 0) == (kernel is BackwardKVDQ), (kernel.__name__, counts)
