"""The CPU timing model of a launch: the kernel's own IR run on the emulator with a modeled clock.

How many blocks an SM holds follows from shared memory, threads and an estimate of registers per thread; those
blocks are run together on one modeled SM (``warpspec.timeline.model_timing``), sharing its tensor cores and its share of
the chip's load bandwidth (the chip's bandwidth over the blocks running at once). The kernel's time is the launch
overhead plus as many of those SM spans as there are waves of blocks, and never less than the time the global
views' bytes take to cross the HBM interface once. Every number comes from a parameter file
(``h200.json`` beside this module: datasheet figures and costs fitted by ``benchmarks/calibrate_model.py``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from warpspec.arguments import elements_needed, launch_grid, view_shapes
from warpspec.errors import ArgumentError, CompileError, WarpspecError
from warpspec.ir import nodes as ir
from warpspec.isa.wgmma import WgmmaMma
from warpspec.timeline.events import Event, Occupancy, Timeline, resident_blocks, role_name
from warpspec.timeline.instrument import instrument
from warpspec.timeline.model_timing import Costs, model_sm, role_groups
from warpspec.timeline.sizing import grid_flops, launch_scalars

#: The H200's parameters, the default of every function here.
H200 = Path(__file__).with_name("h200.json")
#: The record capacity of an "as recorded" model's instrumented IR: the GPU's build checks it, the model records
#: every event its own way.
RECORDED_CAPACITY = 1


def load_parameters(path: str | Path | None = None) -> dict:
    """A device's model parameters (``h200.json`` when ``path`` is None)."""
    return json.loads(Path(path or H200).read_text())


def estimated_registers(kernel: ir.Kernel, parameters: dict) -> int:
    """Registers per thread: the largest WGMMA accumulator slice a thread holds (32-bit words) plus a fixed
    overhead, rounded up to the allocation granule. For V3 at 128×128 this gives the 154 (160 allocated) that
    ptxas reports."""
    words = 0
    for stmt in ir.walk(kernel.body):
        if isinstance(stmt, WgmmaMma):
            d = stmt.d.decl
            words = max(words, math.ceil(math.prod(d.shape) * d.dtype.nbytes / 4 / stmt.threads[1]))
    granule = parameters["register_granule"]
    return math.ceil((words + parameters["register_overhead"]) / granule) * granule


def shared_bytes(kernel: ir.Kernel) -> int:
    """The shared memory one block of ``kernel`` asks for: its plan's bytes and the alignment reserve."""
    return kernel.facts.shared.total_bytes + kernel.facts.target.shared_alignment


def occupancy(kernel: ir.Kernel, parameters: dict, registers: int | None = None) -> tuple[int, str]:
    """How many blocks of ``kernel`` one SM holds, and the resource that limits it."""
    registers = registers or estimated_registers(kernel, parameters)
    return resident_blocks(shared_bytes(kernel), registers, kernel.num_threads, parameters)


def costs(parameters: dict, memory_bytes_per_ns: float, recorded: bool = False) -> Costs:
    """The per-SM costs of ``parameters``, with this launch's memory share per SM; ``recorded``: those of the
    instrumented build (``model_launch``)."""
    p = parameters
    table = sorted((int(n), float(t)) for n, t in p["wgmma_tflops_16bit"].items())

    def rate(m: int, n: int, k: int, dtype) -> float:
        # Linear in N between the table's rows (a wider instruction keeps the tensor cores busier), flat outside.
        below = [row for row in table if row[0] <= n] or table[:1]
        above = [row for row in table if row[0] >= n] or table[-1:]
        (n0, t0), (n1, t1) = below[-1], above[0]
        tflops = t0 if n1 == n0 else t0 + (t1 - t0) * (n - n0) / (n1 - n0)
        if dtype.nbytes == 1:
            tflops *= p["wgmma_8bit_speedup"]
        return tflops * 1e3 / p["sm_count"]  # TFLOP/s of the chip -> flops per ns of one SM

    # A recorded wait spans its two clock reads: one that passes lasts as long as the traces show.
    wait_ns = p["recorded_wait_ns"] if recorded else p["wait_ns"]
    return Costs(statement_ns=p["statement_ns"], arrive_ns=p["arrive_ns"], wait_ns=wait_ns,
                 wake_ns=p["wake_ns"], sync_ns=p["sync_ns"], tma_issue_ns=p["tma_issue_ns"],
                 memory_latency_ns=p["memory_latency_ns"], memory_bytes_per_ns=memory_bytes_per_ns,
                 port_bytes_per_ns=p["sm_port_gbps"], memory_burst_ns=p["memory_burst_ns"],
                 wgmma_issue_ns=p["wgmma_issue_ns"], wgmma_latency_ns=p["wgmma_latency_ns"],
                 register_ns_per_element=p["register_ns_per_element"], wgmma_flops_per_ns=rate,
                 elect_ns=p["elect_ns"], record_ns=p["record_ns"], record_join_ns=p["record_join_ns"])


def built_registers(kernel: ir.Kernel) -> int | None:
    """Registers per thread of ``kernel``'s real build: ptxas's count from an NVRTC compile (cached like every
    build), or None when NVRTC is not installed or the kernel does not build."""
    try:
        from warpspec.cuda.launch import compile_kernel
        from warpspec.cuda.sass import parse_ptxas_log

        reports = parse_ptxas_log(compile_kernel(kernel).module.log)
    except (ImportError, OSError, WarpspecError):
        return None
    return max((report.registers for report in reports.values()), default=None)


def model_launch(kernel: ir.Kernel, arguments: dict, parameters: dict | None = None,
                 registers: int | None = None, registers_from: str = "from ptxas", recorded: bool = False) -> Timeline:
    """The modeled timeline of launching ``kernel`` (its IR, e.g. ``warpspec.runtime.kernel_for``) with runtime
    ``arguments`` by parameter name. Array arguments are not read (their values do not change the time): pass the
    arrays or None. ``parameters``: a device's model parameters (default: the H200's); ``registers``: registers
    per thread if known (``built_registers``, or a count the caller was given, which ``registers_from`` names),
    else estimated. The timeline holds the blocks one SM runs together, on SM 0, and ``kernel_ns`` the whole
    launch.

    ``recorded``: model the instrumented build that a GPU timeline comes from instead of the plain one ("as
    recorded"): every block of the SM records, and its timestamps and stores take their time
    (``warpspec.timeline.profile_isa`` declares what each costs), so that the summary sets beside a GPU
    recording's. The SM's span then is a recorded SM's, which the plain launch's time does not include: on the GPU
    the other SMs take up the blocks a slowed one leaves, so ``kernel_ns`` overstates the launch by as much."""
    if kernel.cluster != (1, 1, 1):
        # The blocks of a cluster run on several SMs and reach each other's shared memory: one modeled SM cannot
        # hold them (its remote arrivals and multicasts would find no partner).
        raise CompileError(f"the timing model runs the blocks of one SM and does not model thread-block clusters "
                           f"yet: {kernel.name} sets self.attrs.cluster_blocks to {list(kernel.cluster)}; time it on "
                           f"the GPU (warpspec timeline --backend cuda)", str(kernel.loc))
    p = parameters or load_parameters()
    env = launch_scalars(kernel, arguments, "model_launch")
    grid = launch_grid(kernel, env)
    total = grid[0] * grid[1] * grid[2]
    per_sm, limit = occupancy(kernel, p, registers)
    if per_sm == 0:
        raise ArgumentError(f"{kernel.name}: a block needs more {limit} than an SM of {p['device']} has")
    # The block scheduler spreads blocks over the SMs before it doubles them up.
    resident = min(per_sm, math.ceil(total / p["sm_count"]))
    running = min(total, per_sm * p["sm_count"])  # blocks running at once over the chip
    share = p["load_bandwidth_gbps"] / running * resident  # GB/s = bytes per ns, for this SM
    blocks = [(i % grid[0], i // grid[0] % grid[1], i // (grid[0] * grid[1])) for i in range(resident)]
    simulated = instrument(kernel, len(blocks), RECORDED_CAPACITY).kernel if recorded else kernel
    machines, _ = model_sm(simulated, env, grid, blocks, costs(p, share, recorded))
    span = max(clock.now for m in machines for clock in m.clocks.values())
    waves = math.ceil(total / (per_sm * p["sm_count"]))
    kernel_ns = p["launch_ns"] + waves * span
    # Whatever the blocks' overlap, every byte of the global views crosses the HBM interface at least once.
    compulsory = sum(elements_needed(shape, strides) * stmt.decl.dtype.nbytes
                     for stmt, shape, strides in view_shapes(kernel, env))
    floor_ns = p["launch_ns"] + compulsory / p["hbm_bandwidth_gbps"]
    events, roles = [], []
    for machine in machines:
        groups = role_groups(kernel, machine.tasks)
        names = {index: role_name(g) if g is not None else
                 f"group (threads {machine.tasks[index].begin}-{machine.tasks[index].end - 1})"
                 for index, g in groups.items()}
        for index in sorted(groups, key=lambda i: machine.tasks[i].begin):
            if names[index] not in roles:
                roles.append(names[index])
        events += [Event(machine.block, names[iv.task.index], iv.kind, iv.name, iv.start_ns, iv.end_ns,
                         str(iv.loc), 0, iv.barrier, iv.tile, iv.stage, iv.phase, iv.pending)
                   for iv in machine.intervals]
    flops = grid_flops(kernel, arguments)
    if flops is None:  # control flow that reads data: the simulated blocks' work, as if every block did as much
        flops = sum(m.flops for m in machines) / resident * total
    notes = [f"modeled on {p['device']}: {per_sm} block(s) per SM (limited by {limit}), {total} blocks in {waves} "
             f"wave(s); {resident} block(s) simulated together on SM 0, {span / 1e3:.2f} us per wave"]
    if recorded:
        notes.append("as recorded: the instrumented build, every block of SM 0 recording (its time is a recorded "
                     "SM's, slower than the plain launch's)")
    if floor_ns > kernel_ns:
        notes.append(f"bound by HBM: the global views hold {compulsory / 1e6:.1f} MB, which take "
                     f"{floor_ns / 1e3:.1f} us at {p['hbm_bandwidth_gbps']:.0f} GB/s (the waves take "
                     f"{kernel_ns / 1e3:.1f} us)")
        kernel_ns = floor_ns
    resident_per_sm = Occupancy(per_sm, limit, shared_bytes(kernel), registers or estimated_registers(kernel, p),
                                kernel.num_threads, "the model's count, registers " +
                                (registers_from if registers else "estimated"))
    return Timeline(kernel.name, "model", dict(kernel.constants), kernel_ns, events, roles, flops or None, notes,
                    sm=0, occupancy=resident_per_sm, view_bytes=compulsory, hbm_gbps=p["hbm_bandwidth_gbps"])
