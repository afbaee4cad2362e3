"""The persistent attention forward (``warpspec.ops.attention_persistent_kernel``) on the emulator: blocks that walk
several (query tile, head) tiles against the numpy softmax (both causal modes, grouped-query heads, rows that see no
key, more tiles than blocks and fewer; two consumer warpgroups and three), under random interleavings, a planted Q
reload before the last O store has read the buffer caught at its line, and the NVRTC build (no spills, no serialized
WGMMA)."""

import numpy as np
import pytest

from tests.ops.test_attention import expected, line_of, lse_of, operands
from tests.support.example_checks import emulator  # noqa: F401  (autouse: the emulator, its deterministic schedule)

from warpspec import ArgumentError, BarrierError
from warpspec.dtypes import bfloat16, float16, int32, uint32
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.ops import attention_persistent_kernel as apk
from warpspec.ops.attention_kernel import LOG2_E

KERNEL_FILE = apk.__file__


def run(kernel, q, k, v, num_sms):
    """One launch of ``kernel`` on [B, H, S, D] numpy operands with a grid bound of ``num_sms`` blocks."""
    batch, heads, seq_q, head_dim = q.shape
    out = np.full_like(q, np.nan)
    walk = apk.tile_walk(seq_q, k.shape[2], batch * heads, kernel.block_m, kernel.causal, num_sms)
    kernel(seq_q, k.shape[2], batch * heads, heads, heads // k.shape[1], head_dim ** -0.5 * LOG2_E, q, k, v, out,
           lse_of(q), walk, num_sms)
    return out


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q, seq_k, num_sms", [(200, 150, 3), (300, 90, 2), (70, 300, 16)])
def test_blocks_walking_several_tiles_match_numpy(causal, seq_q, seq_k, num_sms):
    """Two batches of 4 query heads over 2 K/V heads: 2 or 3 query tiles each, 16 or 24 tiles on 2, 3 or 16 blocks
    (each block's rings, turns and Q buffer running on from tile to tile); causal S_q > S_k gives tiles whose rows
    see no key at all (no K/V tile, zeros)."""
    q, k, v = operands(2, 4, 2, seq_q, seq_k, 64, np.float16)
    kernel = apk.AttentionPersistent(float16, head_dim=64, causal=causal, block_n=64, num_stages=2)
    out = run(kernel, q, k, v, num_sms)
    assert np.abs(out.astype(np.float32) - expected(q, k, v, causal)).max() < 2e-3


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim, seq_q, seq_k, num_sms", [(64, 450, 150, 3), (64, 300, 90, 2), (64, 70, 300, 16),
                                                             (128, 420, 130, 2)])
def test_three_consumer_warpgroups_walking_several_tiles_match_numpy(causal, head_dim, seq_q, seq_k, num_sms):
    """Three consumer warpgroups at D 64 and 128 (192-row tiles, the Q slots' 64-row slices and ``q_free``
    arrivals one per warpgroup, the turn around a ring of three, all running on from tile to tile)."""
    q, k, v = operands(2, 4, 2, seq_q, seq_k, head_dim, np.float16)
    kernel = apk.AttentionPersistent(float16, head_dim=head_dim, causal=causal, block_n=64, num_stages=2,
                                     consumers=3)
    assert (kernel.block_m, kernel.q_slots) == (192, 2)
    out = run(kernel, q, k, v, num_sms)
    assert np.abs(out.astype(np.float32) - expected(q, k, v, causal)).max() < 2e-3


@pytest.mark.parametrize("seed", [0, 1])
def test_three_consumer_warpgroups_under_random_interleavings(seed, monkeypatch):
    monkeypatch.setenv(SEED_VARIABLE, str(seed))
    q, k, v = operands(1, 3, 1, 400, 200, 64, np.float16, seed=3)
    kernel = apk.AttentionPersistent(float16, head_dim=64, causal=True, block_n=96, num_stages=2, consumers=3)
    out = run(kernel, q, k, v, 2)
    assert np.abs(out.astype(np.float32) - expected(q, k, v, True)).max() < 2e-3


@pytest.mark.parametrize("head_dim, block_n, num_stages, q_slots", [
    (128, 128, 2, 2), (128, 96, 2, 2), (64, 48, 3, 2), (256, 80, 2, 1), (256, 48, 2, 2)])
def test_every_head_dim_and_tile(head_dim, block_n, num_stages, q_slots):
    """Two Q slots where they fit beside the rings in 227 KB of shared memory (D 256 at 80-key tiles: one)."""
    q, k, v = operands(1, 2, 1, 300, 170, head_dim, np.float16, seed=1)
    kernel = apk.AttentionPersistent(float16, head_dim=head_dim, causal=True, block_n=block_n, num_stages=num_stages)
    assert kernel.q_slots == q_slots
    out = run(kernel, q, k, v, 2)
    assert np.abs(out.astype(np.float32) - expected(q, k, v, True)).max() < 2e-3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_interleavings(seed, monkeypatch):
    """Under the emulator's random schedules: no race, barrier misuse or deadlock across tiles, the same result."""
    monkeypatch.setenv(SEED_VARIABLE, str(seed))
    q, k, v = operands(1, 3, 1, 150, 200, 64, np.float16, seed=3)
    kernel = apk.AttentionPersistent(float16, head_dim=64, causal=True, block_n=64, num_stages=2)
    out = run(kernel, q, k, v, 2)
    assert np.abs(out.astype(np.float32) - expected(q, k, v, True)).max() < 2e-3


class LoadsQBeforeTheLastStore(apk.AttentionPersistent):
    """The producer loads each tile's Q without waiting for ``q_free``: the TMA load writes a Q buffer while a
    warpgroup's O store of the tile that used it last may still read it."""

    def produce_tiles(self, gq, gk, gv, sq, sk, sv, q_loaded, q_free, pipe_k, pipe_v, seq_q, seq_k, heads, group,
                      m_tiles, walk, blocks):
        filled: int32 = 0
        slot: int32 = 0
        phase: uint32 = 0
        first, end = self.block_walk(walk)
        for position in self.range(first, end):
            offset_m, bh = self.tile_at(walk, blocks, position, m_tiles)
            kv_bh: int32 = bh // heads * (heads // group) + bh % heads // group
            n_tiles = self.key_tiles(offset_m, seq_q, seq_k)
            self.produce_tile(gq, gk, gv, sq[slot], sk, sv, q_loaded[slot], pipe_k, pipe_v, bh, kv_bh, offset_m, 0,
                              n_tiles)
            filled = filled + n_tiles
            slot, phase = self.next_slot(slot, phase)
        self.drain(pipe_k, pipe_v, filled)

    def free_q(self, q_free):
        pass  # nobody waits for q_free


def test_planted_bug_q_reloaded_before_the_last_o_store_is_caught_at_the_reload():
    """Without the ``q_free`` hand-off the producer reloads a Q slot while the tile that used it last is still in
    flight. Each of the 4 tiles reads one key tile, so the rings hold the producer back by nothing: it re-arms
    ``q_loaded[0]`` for tile 2 before tile 0's Q has landed, a BarrierError at the reload's arrival (the arrival
    would complete a second phase while the first still waits for its bytes)."""
    q, k, v = operands(1, 1, 1, 512, 64, 64, np.float16, seed=2)
    kernel = LoadsQBeforeTheLastStore(float16, head_dim=64, causal=False, block_n=64, num_stages=2)
    with pytest.raises(BarrierError) as raised:
        run(kernel, q, k, v, 1)
    arrive = line_of(apk.Attention.produce_tile.__code__.co_filename,
                     "self.mbarrier.arrive_and_expect_tx(q_loaded, sq.nbytes)")
    assert raised.value.location.rsplit(" at ", 1)[-1] == f"{apk.Attention.produce_tile.__code__.co_filename}:{arrive}"
    assert "q_loaded[0]" in str(raised.value) and "more than one phase" in str(raised.value)


@pytest.mark.parametrize("head_dim, block_n, num_stages, consumers, causal", [
    (64, 128, 2, 2, True), (128, 128, 2, 2, True), (64, 64, 2, 2, True), (64, 128, 3, 2, True),
    (128, 64, 3, 2, True), (64, 128, 2, 3, False), (64, 96, 2, 3, True), (64, 64, 2, 3, True), (128, 64, 3, 3, True),
    (128, 64, 2, 3, False)])
def test_nvrtc_builds_the_persistent_kernel_without_spills(head_dim, block_n, num_stages, consumers, causal):
    """NVRTC compiles the persistent kernel (bf16) at every schedule ops.attention ships for it
    (``persistent_schedule``, causal: the masked variant), and with three consumer warpgroups, with no
    spills, no stack and no ptxas advisory. (Three warpgroups at 160 registers spill one tile size up: causal in
    D 64's 128-key tiles and D 128's 80-key ones, which the kernel refuses, and D 128's 80-key tiles without a
    mask, 4 bytes, which ops.attention never runs on this kernel.)"""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble, parse_ptxas_log
    from warpspec.runtime import kernel_for

    kernel = apk.AttentionPersistent(bfloat16, head_dim=head_dim, causal=causal, block_n=block_n,
                                     num_stages=num_stages, consumers=consumers)
    built = compile_kernel(kernel_for(kernel, {}))
    (report,) = parse_ptxas_log(built.module.log).values()
    assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == (0, 0, 0, ())
    counts = count_instructions(disassemble(built.module.cubin), ["HGMMA", "LDL", "STL"])
    assert counts["HGMMA"] > 0 and counts["LDL"] == counts["STL"] == 0


def walk_loads(walk, seq_q, seq_k, block_m, causal, blocks):
    """Each block's share of the walk in the walk's own cost model, and every tile id it lists."""
    starts, listed = walk[:blocks + 1], walk[blocks + 1:]
    cost = apk.TILE_OVERHEAD_STEPS + apk.tile_keys(seq_q, seq_k, block_m, causal) / 128.0
    m_tiles = len(cost)
    return [cost[listed[starts[b]:starts[b + 1]] % m_tiles].sum() for b in range(blocks)], listed


@pytest.mark.parametrize("seq, block_m", [(2048, 128), (4096, 192), (16384, 128), (1024, 192)])
def test_the_causal_walk_shares_the_work_evenly(seq, block_m):
    """FlashAttention-3's grid (batch x seq = 16384, 16 heads) on 132 SMs: every tile listed once, and the busiest
    block has at most 4% more work than the average, where dealing tile t to block t mod 132 gave it up to 43%
    more (16384 rows: the average 0.70 of the maximum)."""
    batch_heads = 16384 // seq * 16
    walk = apk.tile_walk(seq, seq, batch_heads, block_m, True, 132)
    m_tiles = -(-seq // block_m)
    assert walk.dtype == np.int32 and len(walk) == 133 + m_tiles * batch_heads and not walk.flags.writeable
    loads, listed = walk_loads(walk, seq, seq, block_m, True, 132)
    assert sorted(listed.tolist()) == list(range(m_tiles * batch_heads))
    assert np.mean(loads) / max(loads) > 0.96
    cost = apk.TILE_OVERHEAD_STEPS + apk.tile_keys(seq, seq, block_m, True) / 128.0
    round_robin = [cost[np.arange(b, m_tiles * batch_heads, 132) % m_tiles].sum() for b in range(132)]
    assert np.mean(round_robin) / max(round_robin) < np.mean(loads) / max(loads)


def test_short_heads_are_walked_in_windows_of_one_wave():
    """Heads of up to 8 query tiles (here 512 rows in 128-row tiles, FlashAttention-3's grid at D 128: 512 heads of
    4 tiles on 132 SMs) are dealt in windows of about one wave, 15 windows of 34 or 35 heads: every block's first
    tile is one of the first window's 35 heads (two waves' windows held 73 or 74). Longer heads keep windows of two
    waves: at 2048 rows (16 tiles a head, 128 heads) 7 windows of 18 or 19 heads."""
    assert [apk.window_waves(m) for m in (1, 4, 8, 9, 16, 64)] == [1, 1, 1, 2, 2, 2]
    walk = apk.tile_walk(512, 512, 512, 128, True, 132)
    starts, listed = walk[:133], walk[133:]
    firsts = listed[starts[:132]]
    assert firsts.max() // 4 == 34
    long_walk = apk.tile_walk(2048, 2048, 128, 128, True, 132)
    assert long_walk[133:][long_walk[:132]].max() // 16 == 18


def test_the_walk_takes_windows_of_any_size_for_timing():
    """``waves`` replaces ``window_waves`` (benchmarks/attention.py --window-waves). At 512 rows (4 tiles a head),
    the blocks' first tiles are the first window's longest while it has 132 tiles: two waves' windows hold 73 or 74
    heads (7 windows), so the first tiles are heads 0-73's; half a wave's hold 16 or 17 (31 windows), so the first
    two windows' 68 tiles each (heads 0-33) give them, where one wave's 35 heads (heads 0-34) do; a window larger than
    the grid is one window, whose longest tiles are the last tiles of heads 0-131. The same tiles are listed whatever
    the windows; anything but a positive number is refused."""
    def first_window_heads(walk):
        return walk[133:][walk[:132]].max() // 4 + 1

    assert apk.tile_walk(512, 512, 512, 128, True, 132, 1) is not apk.tile_walk(512, 512, 512, 128, True, 132)
    assert (apk.tile_walk(512, 512, 512, 128, True, 132, 1) == apk.tile_walk(512, 512, 512, 128, True, 132)).all()
    assert first_window_heads(apk.tile_walk(512, 512, 512, 128, True, 132, 2)) == 74
    assert first_window_heads(apk.tile_walk(512, 512, 512, 128, True, 132, 0.5)) == 34
    assert first_window_heads(apk.tile_walk(512, 512, 512, 128, True, 132, 1)) == 35
    whole = apk.tile_walk(512, 512, 512, 128, True, 132, 100.0)
    assert first_window_heads(whole) == 132
    for waves in (0.5, 2, 100.0):
        walk = apk.tile_walk(512, 512, 512, 128, True, 132, waves)
        assert sorted(walk[133:].tolist()) == list(range(2048))
    for waves in (0, -1, float("nan"), True, "1"):
        with pytest.raises(ArgumentError, match="tile_walk: waves must be a positive number of waves of tiles"):
            apk.tile_walk(512, 512, 512, 128, True, 132, waves)


def test_tiles_of_one_length_go_round_the_blocks_head_by_head():
    """Without a mask every tile costs the same: block b gets tiles b, b + blocks, ... of the head-major list (the
    blocks running at once share few heads), as many as the others or one more."""
    walk = apk.tile_walk(512, 512, 40, 128, False, 7)
    starts, listed = walk[:8], walk[8:]
    for b in range(7):
        assert listed[starts[b]:starts[b + 1]].tolist() == list(range(b, 160, 7))


def test_causal_tiles_keep_bottom_right_alignment_and_empty_tiles():
    """S_q > S_k causal: the first query tiles see no key (a tile of overhead only), the rest up to their last
    row's key; the walk still lists every tile once, the longest first within a window."""
    keys = apk.tile_keys(300, 90, 64, True)
    assert keys.tolist() == [0, 0, 0, 46, 90]  # tile 3: row 255 sees keys up to 255 + 90 - 300 = 45
    walk = apk.tile_walk(300, 90, 8, 64, True, 3)
    loads, listed = walk_loads(walk, 300, 90, 64, True, 3)
    assert sorted(listed.tolist()) == list(range(40))
    assert listed[walk[0]] % 5 == 4  # block 0's first tile is one of the longest


def test_one_tile_read_from_the_walk_is_proved():
    """``prove`` over every interleaving class of a block with one causal tile (D 64, 64-key tiles, 2 stages): the
    producer and both consumer warpgroups read the walk, and reads of one global buffer commute, so the search is
    exhaustive in 184 classes (ordering those reads both ways, it had not finished after 10000 runs)."""
    from warpspec.emulator import prove
    from warpspec.runtime import kernel_for

    kernel = apk.AttentionPersistent(float16, head_dim=64, causal=True, block_n=64, num_stages=2)
    q, k, v = operands(1, 1, 1, 128, 64, 64, np.float16, seed=4)
    out = np.zeros_like(q)
    arguments = dict(seq_q=128, seq_k=64, batch_heads=1, heads=1, group=1, scale_log2=64 ** -0.5 * LOG2_E,
                     q_ptr=q, k_ptr=k, v_ptr=v, o_ptr=out, lse_ptr=lse_of(q),
                     walk_ptr=apk.tile_walk(128, 64, 1, 128, True, 1), num_sms=1)
    result = prove(kernel_for(kernel, {}), arguments)
    assert result.proved and result.exhaustive and result.classes == 184, result.text("one tile")
    assert np.abs(out.astype(np.float32) - expected(q, k, v, True)).max() < 2e-3
