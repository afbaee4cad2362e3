"""The instrumentation pass (warpspec.timeline.instrument) and the instrumented builds it makes: which sites V3 and
V5 get (kinds, names, lines, roles), what each records beside its times (the stage index, a wait's phase operand,
the tile counted at the head of each tile loop: V3, V6, the library's Gemm schedules and attention), the generated
timestamps and record writes, builds NVRTC compiles within the register budget, and plain builds untouched. The
decoding is tests/timeline/test_gpu_decode.py."""

import re
from dataclasses import replace
from pathlib import Path

import pytest

import matmul_v3
import matmul_v4
import matmul_v5
import warpspec
from warpspec.cuda.codegen import generate
from warpspec.cuda.compiler import compile_cuda
from warpspec.cuda.sass import parse_ptxas_log
from warpspec.timeline.profile_isa import ProfileEnd, ProfileJoin, ProfileNextTile, ProfileSetup, ProfileStart
from warpspec.isa.roles import SingleThread, ThreadGroup
from warpspec.ir import nodes as ir
from warpspec.timeline.instrument import PARAMETER, instrument, tile_loops
from warpspec.runtime import kernel_for
from warpspec.timeline.events import KINDS, role_name

V3_FILE = matmul_v3.__file__
PRODUCER, CONSUMER = "producer (threads 128-159)", "consumer (threads 0-127)"
PROFILE_TEXT = ("globaltimer", "%smid", "clock64", PARAMETER, "wsprof")


def v3(num_stages=2, size=2048):
    return kernel_for(matmul_v3.MatmulWGMMAV3(num_stages=num_stages, block_m=128, block_n=128, block_k=64),
                      {"n_size": size, "k_size": size})


def v5(num_stages=4, size=2048):
    return kernel_for(matmul_v5.MatmulWGMMAV5(num_stages=num_stages, block_m=128, block_n=128, block_k=64),
                      {"n_size": size, "k_size": size})


def v6(size=2048):
    import matmul_v6

    schedule = dict(variant="cooperative", num_stages=3, block_m=128, block_n=256, epilogue_n=256)
    return kernel_for(matmul_v6.MatmulWGMMAV6(**schedule), {"n_size": size, "k_size": size})


def line_of(path: str, text: str, occurrence: int = 0) -> int:
    """The 1-based line of ``path`` holding ``text`` (its ``occurrence``-th one)."""
    return [n for n, line in enumerate(Path(path).read_text().splitlines(), 1) if text in line][occurrence]


def test_v3_gets_a_site_per_wait_tma_issue_wgmma_run_wait_group_sync_and_its_epilogue():
    build = instrument(v3(), blocks=4, capacity=64)
    wait = "self.mbarrier.wait("
    expected = [
        ("wait", "wait producer_barriers[{index}]", "producer_barriers[{index}]", line_of(V3_FILE, wait, 0), PRODUCER),
        # a load's barrier is indexed as its tile is, so its record names both
        ("tma", "tma ga -> sa[{index}]", "consumer_barriers[{index}]", line_of(V3_FILE, "self.tma.global_to_shared(",
                                                                                0), PRODUCER),
        ("tma", "tma gb -> sb[{index}]", "consumer_barriers[{index}]", line_of(V3_FILE, "self.tma.global_to_shared(",
                                                                                1), PRODUCER),
        ("wait", "wait producer_barriers[{index}]", "producer_barriers[{index}]", line_of(V3_FILE, wait, 1), PRODUCER),
        ("wait", "wait consumer_barriers[{index}]", "consumer_barriers[{index}]", line_of(V3_FILE, wait, 2), CONSUMER),
        ("wgmma", "wgmma", None, line_of(V3_FILE, "self.wgmma.mma("), CONSUMER),
        ("wgmma_wait", "wgmma.wait_group(0)", None, line_of(V3_FILE, "self.wgmma.wait_group(0)"), CONSUMER),
        ("epilogue", "epilogue", None, line_of(V3_FILE, "self.sync()"), CONSUMER),
        ("sync", "sync", None, line_of(V3_FILE, "self.sync()"), CONSUMER),
    ]
    got = [(s.kind, s.name, s.barrier, s.loc.line, role_name(s.group)) for s in build.sites]
    assert got == expected
    assert all(Path(s.loc.file).resolve() == Path(V3_FILE).resolve() for s in build.sites)
    assert {s.kind for s in build.sites} <= set(KINDS)
    assert build.recorders == (0, 128) and (build.blocks, build.capacity) == (4, 64)
    # The recorded index is the barrier's (or tile's) runtime index into its leading dimension.
    assert build.sites[0].render(1) == ("wait producer_barriers[1]", "producer_barriers[1]")
    assert build.sites[1].render(0) == ("tma ga -> sa[0]", "consumer_barriers[0]")


def test_the_pass_brackets_each_site_and_adds_the_buffer_parameter():
    kernel = v3()
    build = instrument(kernel, blocks=2, capacity=16)
    out = build.kernel
    assert out.params[:-1] == kernel.params and out.params[-1].name == PARAMETER
    assert repr(out.params[-1].type) == "~int64"
    setup = out.body[0]
    assert isinstance(setup, ProfileSetup) and setup.buffer is out.params[-1].var
    assert (setup.recorders, setup.sampled, setup.capacity, setup.sites, setup.sm) == \
        ((0, 128), 2, 16, len(build.sites), 0)
    assert (instrument(kernel, blocks=2, capacity=16, sm=7).kernel.body[0].sm, build.sm) == (7, 0)
    stmts = list(ir.walk(out.body))
    starts = [s.site for s in stmts if isinstance(s, ProfileStart)]
    ends = [s.site for s in stmts if isinstance(s, ProfileEnd)]
    assert sorted(starts) == sorted(ends) == list(range(len(build.sites)))
    # The wait's end records the barrier's index expression: V3's ring stage.
    wait_end = next(s for s in stmts if isinstance(s, ProfileEnd) and s.site == 0)
    assert isinstance(wait_end.index, ir.Var) and wait_end.index.name == "stage"
    # After a single_thread body with sites the recording warp's lanes agree on their count again.
    producer = next(s for s in out.body if isinstance(s, ThreadGroup) and s.begin == 128)
    loop_body = next(s for s in producer.body if isinstance(s, ir.For)).body
    single = next(i for i, s in enumerate(loop_body) if isinstance(s, SingleThread))
    assert isinstance(loop_body[single + 1], ProfileJoin)
    assert sum(isinstance(s, ProfileJoin) for s in stmts) == 1
    # The input kernel is left as it was.
    assert not any(isinstance(s, (ProfileStart, ProfileEnd, ProfileSetup)) for s in ir.walk(kernel.body))


def test_v5_epilogue_starts_after_the_last_wait_group_and_tma_from_a_warp_is_a_site():
    build = instrument(v5(), blocks=4, capacity=64)
    path = matmul_v5.__file__
    producer_path = matmul_v4.__file__  # V5 keeps V4's producer
    kinds = [(s.kind, s.loc.line) for s in build.sites if s.kind in ("tma", "wgmma_wait", "epilogue")]
    assert kinds == [("tma", line_of(producer_path, "self.tma.global_to_shared(", 0)),
                     ("tma", line_of(producer_path, "self.tma.global_to_shared(", 1)),
                     ("wgmma_wait", line_of(path, "self.wgmma.wait_group(1)")),
                     ("wgmma_wait", line_of(path, "self.wgmma.wait_group(0)")),
                     ("epilogue", line_of(path, "self.mbarrier.arrive(pipe.empty_barriers[self.previous(", 1))]
    assert build.recorders == (0, 256)
    waits = {s.name for s in build.sites if s.kind == "wait"}
    assert waits == {"wait full_barriers[{index}]", "wait empty_barriers[{index}]"}
    # Pipeline's loads complete on the full barrier of the stage they fill: their records name it.
    assert {s.barrier for s in build.sites if s.kind == "tma"} == {"full_barriers[{index}]"}
    # Pipeline's waits are inlined: the site's line names the kernel's call first, then the library line.
    assert all(" -> Pipeline." in str(s.loc) for s in build.sites if s.kind == "wait")


def test_instrumented_source_reads_the_clocks_and_writes_each_event_with_its_runtime_index():
    build = instrument(v3(), blocks=4, capacity=64)
    source = generate(build.kernel).source
    body = source.split('extern "C" __global__')[1]
    assert f"u64 {PARAMETER}" in body.split("{")[0]
    assert body.count("%%globaltimer") == 2 and body.count("%%smid") == 1
    # Unrolled by its two stages, the producer loop's first wait records stage 0, then stage 1 (constants); the
    # drain loop is not unrolled, so its wait records the stage variable's runtime value.
    recorded = [(int(site), index, high) for high, site, index in re.findall(
        r"wsprof_event_\[0\] = \(static_cast<u64>\((.*)\) << 32\) \| (\d+)u \| "
        r"\(\(static_cast<unsigned>\((.*)\) & 0xffffu\) << 16\);", body)]
    by_site, high_half = {}, {}
    for site, index, high in recorded:
        by_site.setdefault(site, []).append(index)
        high_half.setdefault(site, []).append(high)
    assert by_site[0] == ["0", "1"] and by_site[1] == ["0", "1"]
    assert len(by_site[3]) == 1 and not by_site[3][0].isdigit()
    assert set(by_site) == set(range(len(build.sites)))
    # The first word's high half: the tile (V3 has no tile loop: it stays 0) and, for a wait, the parity it waited
    # for, read from the phase operand (the unrolled copies' register elements).
    assert high_half[0] == [f"(wsprof_tile_ | (static_cast<unsigned>(producer_phases[{i}]) & 1u))" for i in (0, 1)]
    assert high_half[1] == ["wsprof_tile_", "wsprof_tile_"]
    assert "unsigned wsprof_tiles_ = 0, wsprof_tile_ = 0;" in body and "wsprof_tiles_++" not in body
    assert "const unsigned wsprof_capacity_ = 64u;" in body
    # The group's events are written by the recording warp's first lane; the TMA issues inside single_thread by
    # the elected lane, after which the warp's lanes take the largest count.
    writers = re.findall(r"if \((wsprof_lead_ && )?wsprof_n_ < wsprof_capacity_\)", body)
    assert writers.count("") == len(by_site[1]) + len(by_site[2]) == 4
    assert writers.count("wsprof_lead_ && ") == len(recorded) - 4
    assert body.count('redux.sync.max.u32 %0, %0, 0xffffffff;" : "+r"(wsprof_n_)') == 2  # one per unrolled copy
    assert "const int recorder_ = warp == 0 ? 0 : warp == 4 ? 1 : -1;" in body


def test_only_blocks_on_the_chosen_sm_take_a_slot_with_one_atomic_at_their_start():
    body = generate(instrument(v3(), blocks=4, capacity=64, sm=3).kernel).source.split('extern "C" __global__')[1]
    # The block's SM against the chosen one, then one atomicAdd per recording warp (its first lane's, shared with
    # the warp), before any loop: the hot loop holds plain stores only.
    assert "if (recorder_ >= 0 && smid_ == 3u) {" in body
    assert body.count("atomicAdd(") == body.count("atomicCAS(") == 1 and body.count("%%gridid") == 1
    # A counter tagged with another launch's %gridid is claimed for this one, counting this block as slot 0.
    assert "const u64 seen_ = atomicCAS(counter_, old_, (grid_ << 24) | 1ull);" in body
    assert "slot_ = (old_ >> 24) == grid_ ? atomicAdd(counter_, 1ull) & 0xffffffull : 0ull;" in body
    assert "slot_ = __shfl_sync(0xffffffffu, slot_, 0);" in body and "if (slot_ < 4ull) {" in body
    assert body.index("atomicAdd") < body.index("for (")
    # The arrays follow the two recorders' counters.
    assert "wsprof_rec_ = counters_ + 2ull + (slot_ * 2ull + recorder_) * 200ull;" in body


def test_a_persistent_kernel_gets_an_epilogue_per_tile():
    build = instrument(v6(), blocks=4, capacity=64)
    (epilogue,) = [i for i, s in enumerate(build.sites) if s.kind == "epilogue"]
    consumer = next(s for s in build.kernel.body if isinstance(s, ThreadGroup) and s.begin == 0)
    tile_loop = next(s for s in consumer.body if isinstance(s, ir.For))
    starts = [s for s in ir.walk(tile_loop.body) if isinstance(s, ProfileStart) and s.site == epilogue]
    ends = [s for s in ir.walk(tile_loop.body) if isinstance(s, ProfileEnd) and s.site == epilogue]
    assert len(starts) == len(ends) == 1
    # It starts after the tile's last wgmma.wait_group and holds the tile's C store.
    kinds = [build.sites[s.site].kind for s in ir.walk(tile_loop.body) if isinstance(s, ProfileStart)]
    assert kinds.index("epilogue") > max(i for i, kind in enumerate(kinds) if kind == "wgmma_wait")
    assert "tma" in kinds[kinds.index("epilogue"):]


@pytest.mark.parametrize("make", [v3, v5, v6], ids=["V3", "V5", "V6"])
def test_instrumented_builds_compile_within_the_register_budget_and_are_cache_entries_of_their_own(make):
    kernel = make(size=8192)
    plain = compile_cuda(generate(kernel).source)
    build = instrument(kernel, blocks=4, capacity=2048)
    profiled = compile_cuda(generate(build.kernel).source)
    assert profiled.cubin[:4] == b"\x7fELF" and profiled.key != plain.key
    report = parse_ptxas_log(profiled.log)[kernel.name]
    assert report.registers * kernel.num_threads <= 65536 and report.registers <= 255
    assert report.spill_store_bytes == report.spill_load_bytes == report.stack_bytes == 0
    # The instrumentation costs a few registers, not a different kernel.
    assert report.registers <= parse_ptxas_log(plain.log)[kernel.name].registers + 32


@pytest.mark.parametrize("make", [v3, v5, v6], ids=["V3", "V5", "V6"])
def test_plain_builds_are_unchanged_by_the_feature(make):
    kernel = make()
    before = generate(kernel).source
    instrument(kernel, blocks=4, capacity=64)  # making an instrumented build leaves the plain one alone
    after = generate(kernel).source
    assert before == after
    for text in PROFILE_TEXT:
        assert text not in after


def test_a_kernel_parameter_with_the_buffers_name_is_refused():
    kernel = v3()
    param = kernel.params[0]
    clash = replace(kernel, params=(ir.Param(PARAMETER, param.type, param.var),) + kernel.params[1:])
    with pytest.raises(warpspec.CompileError, match=f"kernel parameter '{PARAMETER}' is reserved for profiling"):
        instrument(clash, blocks=1, capacity=1)


def test_a_kernel_without_sites_still_builds_instrumented_and_records_nothing():
    from tests.kernels.foundation_kernels import CompileTimeRecursion

    build = instrument(kernel_for(CompileTimeRecursion(), {"depth": 3}), blocks=1, capacity=8)
    assert build.sites == () and build.recorders == ()
    source = generate(build.kernel).source
    assert "const int recorder_ = -1;" in source
    assert compile_cuda(source).cubin[:4] == b"\x7fELF"


def test_tma_stores_and_their_wait_groups_are_sites_of_the_copy_example():
    from tma_copy import TmaCopy

    build = instrument(kernel_for(TmaCopy(tile_m=64, tile_n=64), {}), blocks=2, capacity=8)
    assert [(s.kind, s.name, role_name(s.group)) for s in build.sites] == [
        ("wait", "wait empty[{index}]", "producer (threads 0-31)"),
        ("tma", "tma src -> buffers[{index}]", "producer (threads 0-31)"),
        ("wait", "wait full[{index}]", "group (threads 32-63)"),
        ("tma", "tma buffers[{index}] -> dst", "group (threads 32-63)"),
        ("tma_wait", "tma.wait_group(0)", "group (threads 32-63)"),
    ]
    assert build.recorders == (0, 32)
    assert compile_cuda(generate(build.kernel).source).cubin[:4] == b"\x7fELF"


def test_a_wgmma_run_without_its_commit_in_the_same_list_ends_after_its_last_mma():
    from warpspec.isa.wgmma import WgmmaCommit, WgmmaMma

    kernel = v3()
    consumer = next(s for s in kernel.body if isinstance(s, ThreadGroup) and s.begin == 0)
    loop = next(s for s in consumer.body if isinstance(s, ir.For))
    # The commit moved after the loop: the loop body's run has no commit.
    body = tuple(s for s in loop.body if not isinstance(s, WgmmaCommit))
    commit = next(s for s in loop.body if isinstance(s, WgmmaCommit))
    consumer_body = tuple(replace(loop, body=body) if s is loop else s for s in consumer.body)
    at = consumer_body.index(next(s for s in consumer_body if isinstance(s, ir.For))) + 1
    consumer = replace(consumer, body=consumer_body[:at] + (commit,) + consumer_body[at:])
    kernel = replace(kernel, body=tuple(consumer if isinstance(s, ThreadGroup) and s.begin == 0 else s
                                        for s in kernel.body))
    build = instrument(kernel, blocks=1, capacity=8)
    (run,) = [i for i, s in enumerate(build.sites) if s.kind == "wgmma"]
    out_loop = next(s for s in next(s for s in build.kernel.body if isinstance(s, ThreadGroup) and s.begin == 0).body
                    if isinstance(s, ir.For))
    mma = next(i for i, s in enumerate(out_loop.body) if isinstance(s, WgmmaMma))
    assert isinstance(out_loop.body[mma - 1], ProfileStart) and out_loop.body[mma - 1].site == run
    assert isinstance(out_loop.body[mma + 1], ProfileEnd) and out_loop.body[mma + 1].site == run


def test_a_kernel_without_thread_groups_is_one_role_with_its_epilogue():
    import matmul_v1

    kernel = kernel_for(matmul_v1.MatmulWGMMAV1(block_m=64, block_n=64, block_k=16), {"n_size": 1024, "k_size": 1024})
    build = instrument(kernel, blocks=4, capacity=64)
    assert build.recorders == (0,)
    assert {role_name(s.group) for s in build.sites} == {CONSUMER}
    kinds = [s.kind for s in build.sites]
    assert kinds.count("epilogue") == 1 and kinds.index("epilogue") > kinds.index("wgmma_wait")
    # The epilogue runs to the kernel's end: its end is the last statement before the recorders finish.
    assert isinstance(build.kernel.body[-2], ProfileEnd) and build.kernel.body[-2].site == kinds.index("epilogue")


def recorded_operands(build):
    """(site kind, site name, staged, index, phase) per ProfileEnd of ``build``, in program order, the operands
    as the IR printer writes them."""
    from warpspec.ir.printer import format_expr

    return [(build.sites[s.site].kind, build.sites[s.site].name, build.sites[s.site].staged, format_expr(s.index),
             None if s.phase is None else format_expr(s.phase))
            for s in ir.walk(build.kernel.body) if isinstance(s, ProfileEnd)]


def test_v3_records_each_waits_stage_and_phase_operand_and_the_stage_its_wgmma_reads():
    build = instrument(v3(), blocks=4, capacity=64)
    assert recorded_operands(build) == [
        ("wait", "wait producer_barriers[{index}]", True, "stage", "producer_phases[stage]"),
        ("tma", "tma ga -> sa[{index}]", True, "stage", None),
        ("tma", "tma gb -> sb[{index}]", True, "stage", None),
        ("wait", "wait producer_barriers[{index}]", True, "stage", "producer_phases[stage]"),  # the drain
        ("wait", "wait consumer_barriers[{index}]", True, "stage", "consumer_phases[stage]"),
        ("wgmma", "wgmma", True, "stage", None),  # mma(sa[stage], sb[stage].T, acc): B's index
        ("wgmma_wait", "wgmma.wait_group(0)", False, "0", None),
        ("sync", "sync", False, "0", None),
        ("epilogue", "epilogue", False, "0", None),
    ]
    # One tile per block: no tile loop, so nothing counts tiles and every event is of tile 0.
    assert tile_loops(v3().body) == ()
    assert not any(isinstance(s, ProfileNextTile) for s in ir.walk(build.kernel.body))


def test_v6_counts_its_tiles_at_the_head_of_each_roles_tile_loop():
    kernel = v6()
    producer_loop, consumer_loop = tile_loops(kernel.body)
    assert (producer_loop.var.name, consumer_loop.var.name) == ("tile", "tile")
    k_loops = [s for s in producer_loop.body if isinstance(s, ir.For)]
    assert len(k_loops) == 1 and k_loops[0].var.name == "offset_k"  # the tile loop holds the K loop
    build = instrument(kernel, blocks=4, capacity=64)
    out_loops = tile_loops(build.kernel.body)
    assert len(out_loops) == 2 and all(isinstance(loop.body[0], ProfileNextTile) for loop in out_loops)
    assert sum(isinstance(s, ProfileNextTile) for s in ir.walk(build.kernel.body)) == 2
    # The producer's drain loop follows its tile loop: no tile loop itself (it holds no loop), its waits belong to
    # the last tile.
    operands = recorded_operands(build)
    assert operands[:5] == [
        ("wait", "wait empty_barriers[{index}]", True, "Pipeline.producer_stage", "Pipeline.producer_phase"),
        ("tma", "tma ga -> sa[{index}]", True, "Pipeline.producer_stage", None),
        ("tma", "tma gb -> sb[{index}]", True, "Pipeline.producer_stage", None),
        ("wait", "wait empty_barriers[{index}]", True, "Pipeline.producer_stage", "Pipeline.producer_phase"),
        ("wait", "wait full_barriers[{index}]", True, "Pipeline.consumer_stage", "Pipeline.consumer_phase"),
    ]
    assert operands[5] == ("wgmma", "wgmma", True, "Pipeline.consumer_stage", None)
    # The epilogue's TMA store reads the output buffer sc[0, 0]: its index names it, it is no stage.
    assert ("tma", "tma sc[{index}] -> gc", False, "((0 * 1) + 0)", None) in operands
    assert {(kind, staged) for kind, _, staged, _, _ in operands[6:]} == {
        ("wgmma_wait", False), ("epilogue", False), ("tma_wait", False), ("sync", False), ("tma", False)}


@pytest.mark.parametrize("schedule, loops", [
    # The producer's walk and the consumers'; with one tile per block each walk runs once (tile 0).
    (dict(persistent=False, stream_k=False), ["tile", "tile"]),
    (dict(persistent=True, stream_k=False), ["tile", "tile"]),
    (dict(persistent=True, stream_k=True), ["tile", "piece", "tile", "piece"]),  # pieces numbered on after tiles
], ids=["one-tile-per-block", "persistent", "stream-K"])
def test_the_library_gemms_tile_loops(schedule, loops):
    from warpspec.dtypes import float16
    from warpspec.ops import kernels

    script = kernels.Gemm(float16, float16, b_k_major=True, has_bias=False, activation=None, num_stages=3,
                          block_m=128, block_n=128, **schedule)
    assert [loop.var.name for loop in tile_loops(kernel_for(script, {}).body)] == loops


def test_split_k_and_attention_compute_one_tile_per_block_and_attentions_wgmma_stage_is_its_k_or_v_tiles():
    from warpspec.dtypes import bfloat16, float16
    from warpspec.ops import attention_kernel, kernels

    split = kernels.SplitGemm(float16, float16, b_k_major=True, has_bias=False, activation=None, swap_ab=False,
                              split_k=2, num_stages=3, block_m=128, block_n=128)
    assert tile_loops(kernel_for(split, {}).body) == ()
    attention = kernel_for(attention_kernel.Attention(bfloat16, head_dim=128, causal=True, block_n=128,
                                                      num_stages=2, unroll=1), {})
    assert tile_loops(attention.body) == ()  # its K/V loop is the outermost loop
    # S = Q·Kᵀ reads sq[w][0] (A) and sk[stage][0] (B), O += P·V reads registers and sv[stage][0]: the stage is
    # B's, flattened over sk's [stages, 1] leading dimensions.
    wgmma = {index for kind, _, staged, index, _ in recorded_operands(instrument(attention, 1, 8))
             if kind == "wgmma" and staged}
    assert wgmma == {"((Pipeline.consumer_stage * 1) + 0)"}


def test_a_build_whose_sites_or_indices_outgrow_the_records_fields_is_refused(monkeypatch):
    from warpspec.timeline import instrument as pass_module

    monkeypatch.setattr(pass_module, "SITE_BITS", 3)  # 8 sites: V3 has 9
    with pytest.raises(warpspec.CompileError, match="a profiling build records at most 8 sites, and this kernel "
                                                    "has more"):
        instrument(v3(), blocks=1, capacity=1)
    monkeypatch.setattr(pass_module, "SITE_BITS", 16)
    monkeypatch.setattr(pass_module, "INDEX_BITS", 0)  # one barrier per array: V3 has two
    with pytest.raises(warpspec.CompileError, match="records indices into arrays of at most 1 barriers or tiles, "
                                                    "and this wait indexes one of 2"):
        instrument(v3(), blocks=1, capacity=1)


def test_a_persistent_build_packs_its_tile_into_each_events_first_word():
    source = generate(instrument(v6(), blocks=4, capacity=64).kernel).source
    body = source.split('extern "C" __global__')[1]
    # Each tile loop's iteration moves every thread's tile on, already in place for the word's high half.
    assert body.count("wsprof_tile_ = wsprof_tiles_++ << 1;") == 2
    assert ("wsprof_event_[0] = (static_cast<u64>((wsprof_tile_ | (static_cast<unsigned>(Pipeline_producer_phase) "
            "& 1u))) << 32) | 0u | ((static_cast<unsigned>(Pipeline_producer_stage) & 0xffffu) << 16);") in body
