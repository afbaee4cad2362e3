"""Choosing the schedule of an autotuned Script on the GPU: prune, build in parallel, time, remember, explain.

Calling a ``TunedScript`` on the CUDA back end comes here (``tuned_call``):

1. The tuning key is computed (see ``warpspec.tune.cache``). A winner stored under it, by this process or an
   earlier one, is launched at once: nothing else is compiled or timed, and its cubin comes from the compile cache.
2. Otherwise every schedule is pruned (``warpspec.tune.prune``: each rejection states its reason), the rest are
   generated and compiled in parallel worker processes (one per core, longest first), and each one that compiled
   without spilling registers is timed on the GPU as soon as its build finishes (``warpspec.tune.bench``: CUDA
   events, L2 flushed before each run, median). Schedules that failed to compile are never timed, nor are those
   that spill, unless nothing else is left. The schedules within 3% of the fastest are timed again, taking turns
   (``final_round``), and the fastest by the median of all their timings wins; it is stored under the key and
   launched.

**Your arguments are the benchmark's arguments.** The candidates run on the tensors of the call itself, so no
memory is allocated for tuning and the timed problem is exactly the real one. Output tensors are written by every
candidate, then by the winner's final launch, so what the call leaves behind is the winner's result. A kernel that
reads what it writes (accumulates into an output, works in place) would see the candidates' writes: pin a schedule
for such a kernel, or tune it once on scratch tensors of the same sizes.

Which runtime arguments form the key: by default every integer runtime argument, as the bucket of sizes it falls
in (``cache.size_bucket``: the next power of two). A Script chooses with a class attribute, e.g.
``tune_key = ("m_size",)``: only ``m_size``'s bucket then distinguishes calls, and ``tune_key = ()`` makes one
winner serve every size. Compile-time arguments are always part of the key.

``report = tuned.last_report`` explains the last call: one ``ScheduleFate`` per schedule (pruned / failed /
spills / timed / winner, with the reason and the numbers); ``print(report)`` shows it as a table.

``configure(workers=..., verbose=..., bench=...)`` sets the number of build processes (default: one per core),
shows the build progress line on stderr even when it is not a terminal, and replaces the GPU side (timing and
launching; tests pass a fake).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import numbers
import os
import pathlib
import pickle
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from warpspec.cuda.compiler import CompiledModule, compile_cuda
from warpspec.errors import ArgumentError, CompileError
from warpspec.tune import cache
from warpspec.tune.prune import prune

#: What a schedule came to. ``ok``: built (by ``warpspec build``) without spilling, not timed; a cached report
#: with any other fate is corrupt.
FATES = ("pruned", "failed", "spills", "ok", "timed", "winner")
#: SASS instructions whose counts ``warpspec build`` shows: the tensor core, TMA loads/stores, mbarrier operations,
#: local-memory traffic (spills) and block barriers.
KEY_INSTRUCTIONS = ("HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "LDL", "STL", "BAR")


@dataclass
class ScheduleFate:
    """What happened to one schedule, with the numbers known at that point (None: not measured)."""

    schedule: dict
    fate: str
    reason: str = ""
    build_s: float | None = None  # seconds to compile (a compile-cache hit takes milliseconds)
    registers: int | None = None  # per thread, from ptxas
    shared_bytes: int | None = None  # planned shared memory: tiles and mbarriers
    spill_bytes: int | None = None  # per thread: spill stores plus spill loads, from ptxas
    time_ms: float | None = None  # median kernel time on the GPU
    instructions: dict = field(default_factory=dict)  # SASS counts of KEY_INSTRUCTIONS (``warpspec build`` only)

    @property
    def label(self) -> str:
        """The schedule as ``name=value`` pairs."""
        return " ".join(f"{name}={value}" for name, value in self.schedule.items()) or "(no schedule)"


@dataclass
class TuningReport:
    """How a TunedScript's schedule was chosen: one fate per schedule, in the Script's schedule order."""

    kernel: str
    fates: list[ScheduleFate]
    key: str | None = None  # the tuning key (file name stem under cache_dir()/tuning)
    from_cache: bool = False  # True when the winner came from an earlier tuning run: fates are that run's
    seconds: float = 0.0  # wall time of the tuning run that produced the fates

    @property
    def winner(self) -> ScheduleFate | None:
        """The winning schedule's fate (None for a build-only report)."""
        return next((f for f in self.fates if f.fate == "winner"), None)

    def counts(self) -> dict[str, int]:
        """How many schedules met each fate (only fates that occurred)."""
        counts: dict[str, int] = {}
        for fate in self.fates:
            counts[fate.fate] = counts.get(fate.fate, 0) + 1
        return counts

    def table(self) -> str:
        """The fates as an aligned text table with a summary line."""
        return format_table(self.fates) + "\n" + self.summary()

    def summary(self) -> str:
        """One line: schedule counts per fate, the time taken and whether it came from the tuning cache."""
        counts = ", ".join(f"{count} {fate}" for fate, count in self.counts().items())
        cached = " (an earlier run's report, from the tuning cache)" if self.from_cache else ""
        return f"{self.kernel}: {len(self.fates)} schedules ({counts}) in {self.seconds:.1f} s{cached}"

    def __str__(self) -> str:
        return self.table()


def format_table(fates: list[ScheduleFate]) -> str:
    """Aligned columns: fate, schedule, registers, shared bytes, spill bytes, SASS counts (when known), build
    seconds, GPU milliseconds, reason."""
    counted = [name for name in KEY_INSTRUCTIONS if any(name in f.instructions for f in fates)]
    header = ["fate", "schedule", "regs", "smem", "spill", *counted, "build_s", "time_ms", "reason"]

    def cell(value, digits: int = 0) -> str:
        if value is None:
            return "-"
        return f"{value:.{digits}f}" if isinstance(value, float) else str(value)

    rows = [[f.fate, f.label, cell(f.registers), cell(f.shared_bytes), cell(f.spill_bytes),
             *(cell(f.instructions.get(name)) for name in counted), cell(f.build_s, 2), cell(f.time_ms, 4),
             f.reason] for f in fates]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    return "\n".join(("  ".join(text.ljust(width) for text, width in zip(row, widths)) + "  " + row[-1]).rstrip()
                     for row in [header, *rows])


# ---------------------------------------------------------------------------------------------------- settings


@dataclass
class Settings:
    """How tuning runs; change with ``configure``."""

    workers: int | None = None  # build processes; None: one per available core
    verbose: bool = False  # show the build progress line even when stderr is not a terminal
    bench: object = None  # the GPU side (identity, timing, launch); None: warpspec.tune.bench.CudaBench()


settings = Settings()


def configure(**changes) -> Settings:
    """Change tuning settings (``workers``, ``verbose``, ``bench``) for this process and return them, e.g.
    ``configure(workers=4, verbose=True)``."""
    for name, value in changes.items():
        if not hasattr(settings, name):
            raise TypeError(f"configure() has no setting {name!r}; settings: workers, verbose, bench")
        setattr(settings, name, value)
    return settings


def _bench():
    if settings.bench is None:
        from warpspec.tune.bench import CudaBench

        settings.bench = CudaBench()
    return settings.bench


# ------------------------------------------------------------------------------------------ prune and build


@dataclass
class Candidate:
    """One schedule on its way through pruning and building: its fate so far, IR, generated code and cubin."""

    fate: ScheduleFate
    kernel: object = None  # ir.Kernel once the IR built
    generated: object = None  # GeneratedKernel once generated
    module: CompiledModule | None = None  # once compiled
    sass: str | None = None  # once disassembled (when asked for)


def prepare(scripts: list[tuple[dict, object]], compile_time: dict) -> list[Candidate]:
    """Prune each ``(schedule, pinned Script)`` and generate CUDA C++ for the survivors. Pruned schedules and
    those the code generator rejects are final (``pruned`` / ``failed``); the others are ``ok`` until built."""
    from warpspec.cuda.codegen import generate

    candidates = []
    for schedule, script in scripts:
        verdict = prune(script, compile_time)
        fate = ScheduleFate(dict(schedule), "pruned" if verdict.pruned else "ok", verdict.reason or "",
                            shared_bytes=verdict.shared_bytes)
        candidate = Candidate(fate, verdict.kernel)
        if not verdict.pruned:
            try:
                candidate.generated = generate(verdict.kernel)
            except CompileError as error:
                fate.fate, fate.reason = "failed", str(error)
        candidates.append(candidate)
    return candidates


def build_candidates(candidates: list[Candidate], *, workers: int | None = None, sass: bool = False,
                     progress: bool | None = None, on_built: Callable[[Candidate], None] | None = None) -> None:
    """Compile every ``ok`` candidate, in parallel processes, recording registers, spills and build time (and
    with ``sass`` the disassembly and its KEY_INSTRUCTIONS counts). A compile error makes the candidate
    ``failed``, spilling makes it ``spills`` (with the byte counts in the reason). ``on_built`` is called in this
    process as each build finishes, in completion order. ``progress`` (default: stderr is a terminal, or
    ``configure(verbose=True)``) shows a one-line progress bar on stderr.
    """
    jobs = sorted((c for c in candidates if c.fate.fate == "ok"), key=lambda c: -len(c.generated.source))
    if progress is None:
        progress = settings.verbose or sys.stderr.isatty()
    workers = min(len(jobs), workers or settings.workers or _available_cores())
    done, width = 0, 0

    def finish(candidate: Candidate, result) -> None:
        nonlocal done, width
        _record_build(candidate, *result)
        done += 1
        if progress:
            line = f"[{done}/{len(jobs)}] built {candidate.fate.label}"
            width = max(width, len(line))  # pad over the longer line it replaces
            print(f"\r{line.ljust(width)}", end="", file=sys.stderr, flush=True)
        if on_built is not None:
            on_built(candidate)

    if workers <= 1:
        # One job or one core: a worker process would only add its start-up time.
        for candidate in jobs:
            finish(candidate, _compile_job(candidate.generated.source, candidate.generated.name, sass))
    else:
        with _WorkerPool(workers) as pool:
            futures = {pool.submit((c.generated.source, c.generated.name, sass)): c for c in jobs}
            for future in concurrent.futures.as_completed(futures):
                try:
                    result = future.result()
                except RuntimeError as error:
                    result = (None, str(error), None, None, {})
                finish(futures[future], result)
    if progress and jobs:
        print(file=sys.stderr)



class _WorkerPool:
    """Build worker processes, each a fresh interpreter (``python -c``) serving compile jobs over its pipes.

    Not a multiprocessing pool: its spawn and forkserver start methods import the caller's ``__main__`` script
    in every worker (re-running an unguarded script, and importing whatever it imports, PyTorch included, at a
    cost of seconds per worker), and fork would copy this process's CUDA context. One thread per worker feeds it
    jobs, so ``submit`` returns ordinary futures.
    """

    def __init__(self, size: int):
        self.environment = dict(os.environ)
        # The workers import warpspec from where this process did, whatever the caller did to sys.path.
        package_root = str(pathlib.Path(__file__).resolve().parents[2])
        self.environment["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root,
                                                                       self.environment.get("PYTHONPATH")]))
        self.processes = [self._start() for _ in range(size)]
        self.lock, self.closing = threading.Lock(), False
        self.idle: queue.SimpleQueue = queue.SimpleQueue()
        for process in self.processes:
            self.idle.put(process)
        self.threads = concurrent.futures.ThreadPoolExecutor(size, thread_name_prefix="warpspec-build")

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", _SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                env=self.environment)

    def submit(self, job: tuple) -> concurrent.futures.Future:
        """Queue ``_compile_job(*job)`` for the next free worker. The future raises ``RuntimeError`` when the
        worker failed outside the compiler's error handling or died (a crash in ptxas, say): the job's fate."""
        return self.threads.submit(self._run, job)

    def _run(self, job: tuple):
        process = self.idle.get()
        try:
            pickle.dump(job, process.stdin)
            process.stdin.flush()
            succeeded, value = pickle.load(process.stdout)
        except (OSError, EOFError, pickle.UnpicklingError):
            process.kill()
            code = process.wait()
            for pipe in (process.stdin, process.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()
            with self.lock:
                if not self.closing:  # the next job needs a worker
                    self.processes[self.processes.index(process)] = process = self._start()
            raise RuntimeError(f"the build worker process died (exit code {code})") from None
        finally:
            self.idle.put(process)
        if not succeeded:
            raise RuntimeError(f"the build worker failed: {value}")
        return value

    def __enter__(self) -> _WorkerPool:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        with self.lock:
            self.closing = True  # from now on self.processes is final
        if error is not None:
            # An error while timing (or Ctrl-C): drop the queued builds and stop the running ones.
            self.threads.shutdown(wait=False, cancel_futures=True)
            for process in self.processes:
                process.kill()
        for process in self.processes:
            with contextlib.suppress(OSError):
                process.stdin.close()  # end of jobs: the worker's loop sees end of file and exits
        self.threads.shutdown()
        for process in self.processes:
            process.wait()
            process.stdout.close()


_SERVE = "from warpspec.tune.tuner import _serve; _serve()"


def _serve() -> None:
    """A build worker's main loop: read pickled ``_compile_job`` arguments from stdin until it closes, write
    each ``(succeeded, result or error text)`` pickled to what was stdout."""
    results = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print (ours or a library's) must not corrupt the result stream
    jobs = sys.stdin.buffer
    while True:
        try:
            job = pickle.load(jobs)
        except EOFError:
            return
        try:
            reply = (True, _compile_job(*job))
        except Exception as error:  # noqa: BLE001 - reported to the parent, which raises it
            reply = (False, f"{type(error).__name__}: {error}")
        pickle.dump(reply, results)
        results.flush()


def _available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _compile_job(source: str, name: str, sass: bool) -> tuple:
    """Compile one kernel (in a worker process): ``(module or None, error text, seconds, sass text, counts)``."""
    from warpspec.cuda.sass import count_instructions, disassemble

    start = time.perf_counter()
    try:
        module = compile_cuda(source)
    except CompileError as error:
        return None, str(error), time.perf_counter() - start, None, {}
    seconds = time.perf_counter() - start
    if not sass:
        return module, "", seconds, None, {}
    try:
        text = disassemble(module.cubin)
    except CompileError as error:  # cuobjdump could not read the cubin: no SASS to show or count
        return None, f"{error}\n({module.origin()})", seconds, None, {}
    return module, "", seconds, text, count_instructions(text, KEY_INSTRUCTIONS)


def _record_build(candidate: Candidate, module, error: str, seconds: float, sass_text, counts) -> None:
    from warpspec.cuda.sass import parse_ptxas_log

    fate = candidate.fate
    fate.build_s = seconds
    if module is None:
        fate.fate, fate.reason = "failed", error
        return
    candidate.module, candidate.sass, fate.instructions = module, sass_text, counts
    report = parse_ptxas_log(module.log).get(candidate.generated.name)
    if report is None:
        return  # no ptxas -v lines for this kernel: nothing known about registers or spills
    fate.registers = report.registers
    fate.spill_bytes = report.spill_store_bytes + report.spill_load_bytes
    if fate.spill_bytes:
        fate.fate = "spills"
        fate.reason = (f"spills {fate.spill_bytes} bytes per thread ({report.spill_store_bytes} stored, "
                       f"{report.spill_load_bytes} loaded)")


# -------------------------------------------------------------------------------------------------- tuning


def tune(tuned, runtime: dict, compile_time: dict, bench=None) -> TuningReport:
    """Choose the fastest schedule of ``tuned`` (a TunedScript) for these call arguments on the GPU, without
    consulting or filling the tuning cache. Raises ``CompileError`` listing every schedule's fate when none
    could be timed."""
    from warpspec.cuda.launch import BuiltKernel

    bench = bench or _bench()
    start = time.perf_counter()
    candidates = prepare(tuned.constructible(), compile_time)
    with bench.timing() as measure:

        def time_candidate(candidate: Candidate) -> None:
            try:
                # The candidate's own cubin: launching must not compile it again (the disk cache may be off).
                built = BuiltKernel(candidate.generated, candidate.module)
                candidate.fate.time_ms = measure(candidate.kernel, runtime, built)
            except ArgumentError:
                raise  # the call's arguments are wrong for every schedule: the user's error, not a fate
            except Exception as error:  # noqa: BLE001 - a launch failure is this schedule's fate, not the run's
                candidate.fate.fate, candidate.fate.reason = "failed", f"launch failed: {error}"
                return
            if candidate.fate.fate == "ok":
                candidate.fate.fate = "timed"

        build_candidates(candidates, on_built=lambda c: time_candidate(c) if c.fate.fate == "ok" else None)
        if not any(c.fate.fate == "timed" for c in candidates):
            # Only spilling schedules are left: a slow kernel beats no kernel.
            for candidate in candidates:
                if candidate.fate.fate == "spills":
                    time_candidate(candidate)
        timed = [c for c in candidates if c.fate.time_ms is not None]
        final_round(timed, lambda c: measure(c.kernel, runtime, BuiltKernel(c.generated, c.module)))
    fates = [c.fate for c in candidates]
    if not timed:
        lines = "\n".join(f"{f.label}: {f.fate}: {f.reason}" for f in fates)
        raise CompileError(f"no schedule of {tuned.cls.__name__} could be timed for these arguments:\n{lines}")
    best = min((c.fate for c in timed), key=lambda f: f.time_ms)
    best.fate = "winner"
    return TuningReport(tuned.cls.__name__, fates, seconds=time.perf_counter() - start)


#: The final round: the timed schedules within this fraction of the fastest (at most ``FINAL_ROUND_SIZE`` of them)
#: are timed ``FINAL_ROUND_REPEATS`` more times, taking turns, and ranked by the median of all their medians. The
#: fastest of many first timings is the luckiest as much as the best: with a median's 1–2% spread over 60
#: schedules, re-tuned llm_shapes buckets picked winners that ran 1.5–2.2% slower than the entries they replaced
#: when both were timed side by side (docs/performance.md, twelfth session, run I6).
FINAL_ROUND_MARGIN = 0.03
FINAL_ROUND_SIZE = 4
FINAL_ROUND_REPEATS = 3


def final_round(timed: list, measure: Callable) -> None:
    """Time again the candidates of ``timed`` (``Candidate``s with a first ``time_ms``) close to the fastest, in
    turns (A, B, C, A, B, C, ...: a drift of the GPU's clocks reaches them all alike), and set each one's
    ``time_ms`` to the median of its first time and the new ones. ``measure(candidate)`` times one launch series."""
    if not timed:
        return
    fastest = min(c.fate.time_ms for c in timed)
    finalists = sorted((c for c in timed if c.fate.time_ms <= fastest * (1 + FINAL_ROUND_MARGIN)),
                       key=lambda c: c.fate.time_ms)[:FINAL_ROUND_SIZE]
    if len(finalists) < 2:
        return
    samples = {id(c): [c.fate.time_ms] for c in finalists}
    for _ in range(FINAL_ROUND_REPEATS):
        for candidate in finalists:
            samples[id(candidate)].append(measure(candidate))
    for candidate in finalists:
        candidate.fate.time_ms = statistics.median(samples[id(candidate)])


def tuning_material(tuned, runtime: dict, compile_time: dict, identity: dict) -> dict:
    """Everything the tuning key covers, as a JSON-able dict (see ``warpspec.tune.cache``)."""
    from warpspec.cuda.compiler import nvrtc_version

    return {"kernel": cache.source_identity(tuned.cls),
            "constructor": {"args": list(tuned.args), "kwargs": dict(tuned.kwargs)}, "space": tuned.space.axes,
            "compile_time": compile_time, "sizes": key_sizes(tuned.cls, runtime), "device": identity,
            "nvrtc": ".".join(map(str, nvrtc_version()))}


def key_sizes(script_cls, runtime: dict) -> dict[str, int]:
    """The size buckets of the runtime arguments that form the tuning key: those named by the Script's
    ``tune_key`` class attribute, else every integer runtime argument."""
    integers = [name for name, value in runtime.items()
                if isinstance(value, numbers.Integral) and not isinstance(value, bool)]
    names = getattr(script_cls, "tune_key", None)
    if names is None:
        names = integers
    elif isinstance(names, str) or any(name not in integers for name in names):
        raise ArgumentError(f"{script_cls.__name__}.tune_key must be a tuple of integer runtime parameter names "
                            f"({', '.join(integers) or 'none'}), got {names!r}")
    return {name: cache.size_bucket(int(runtime[name])) for name in names}


def tuned_call(tuned, args: tuple, kwargs: dict):
    """Run ``tuned`` (a TunedScript) on the GPU with the schedule chosen for these arguments: remembered in this
    process, stored by an earlier one, or tuned now (and stored). Sets ``tuned.last_report``.

    Within a process the class's code and the GPU stay what they were, so a call with positional arguments like
    an earlier one finds its winner by a generated key function (``_fast_key``: compile-time values, the size
    buckets of the key's sizes and the device) and one dictionary lookup, without hashing the source or
    querying the device: that costs less than the launch itself. Tuning never starts while the current stream
    is capturing a CUDA graph (``ArgumentError``: tune before capturing)."""
    bench = settings.bench or _bench()
    state = tuned.__dict__
    winners = state.get("_warpspec_fast")
    if winners is None:
        winners = state["_warpspec_fast"] = {}
    fast = None
    if not kwargs:
        functions = state.get("_warpspec_key_functions")
        key_function = functions.get(len(args)) if functions is not None else None
        fast = (key_function or _fast_key(tuned, len(args)))(args)
        if fast is not None:
            found = winners.get(fast)
            if found is not None:
                tuned.last_report = found[1]
                return found[2](args)
    from warpspec.frontend.kernel import bind_arguments
    from warpspec.runtime import shape_only

    if shape_only((*args, *kwargs.values())):
        return None  # fake or meta tensors (torch.compile tracing): nothing to tune or run
    runtime, compile_time = bind_arguments(tuned.cls, args, kwargs)
    chosen = tuned.__dict__.setdefault("_warpspec_tuned", {})
    with _on_call_device(tuned, runtime):  # identity, timing and events of the GPU the call launches on
        material = tuning_material(tuned, runtime, compile_time, bench.identity())
        key = cache.entry_key(material)
        if key not in chosen:
            report = _cached_report(tuned, key, material)
            if report is None:
                _refuse_capture(tuned)
                report = tune(tuned, runtime, compile_time, bench)
                report.key = key
                cache.store(key, material, {"kernel": report.kernel, "seconds": report.seconds,
                                            "fates": [asdict(f) for f in report.fates]})
            chosen[key] = (tuned.instantiate(report.winner.schedule), report)
    script, tuned.last_report = chosen[key]
    if fast is not None:
        winners[fast] = (script, tuned.last_report, functools.partial(bench.launch, script, kwargs={}))
        # TunedScript.__call__ tries the guards of the latest winners first: calls of the same signature and size
        # buckets go straight to the winner's launch.
        guards = state.setdefault("_warpspec_guards", [])
        guards.insert(0, _winner_guard(tuned, args, script, tuned.last_report, bench))
        del guards[MAX_GUARDS:]
    return bench.launch(script, args, kwargs)


def stored_schedule(tuned, args: tuple, kwargs: dict) -> dict | None:
    """The winning schedule of ``tuned`` for calls like ``tuned(*args, **kwargs)`` on the current GPU, chosen by
    this process or stored by an earlier one, or None when there is none: nothing is tuned, compiled or run. For
    callers that fall back on their own choice instead of tuning (``warpspec.ops``)."""
    from warpspec.frontend.kernel import bind_arguments

    runtime, compile_time = bind_arguments(tuned.cls, args, kwargs)
    with _on_call_device(tuned, runtime):
        material = tuning_material(tuned, runtime, compile_time, (settings.bench or _bench()).identity())
    key = cache.entry_key(material)
    chosen = tuned.__dict__.get("_warpspec_tuned", {}).get(key)
    report = chosen[1] if chosen is not None else _cached_report(tuned, key, material)
    return None if report is None else dict(report.winner.schedule)


#: Winner guards kept per TunedScript (one per recent signature and size buckets); the oldest goes first.
MAX_GUARDS = 8


def _winner_guard(tuned, args: tuple, script, report, bench):
    """A function ``guard(args)`` that launches ``script`` (the winner chosen for ``args``) when a call's
    positional arguments have the same key as ``args`` (``_fast_key``'s: compile-time values, array classes,
    size buckets, device) and returns MISS otherwise: one comparison per argument instead of building the key."""
    from warpspec.cuda.plan import MISS
    from warpspec.frontend.kernel import parameters

    count = len(args)
    names = getattr(tuned.cls, "tune_key", None)
    where, placed = _device_text(tuned, count)
    namespace = {"MISS": MISS, "_tuned": tuned, "_script": script, "_report": report, "_launch": bench.launch,
                 "_no_keywords": {}, **placed}
    lines = ["def guard(args):", f"    if len(args) != {count}: return MISS"]
    if count:
        lines.append(f"    {', '.join(f'a{j}' for j in range(count))}, = args")
    for j, p in enumerate(parameters(tuned.cls)[:count]):
        value, name = args[j], f"_v{j}"
        namespace[name], namespace[f"_c{j}"] = value, value.__class__
        if not p.runtime:
            lines.append(f"    if a{j}.__class__ is not _c{j} or a{j} != {name}: return MISS")
        elif p.pointer:
            lines.append(f"    if a{j}.__class__ is not _c{j}: return MISS")
        elif value.__class__ is int and (names is None or p.name in names):
            bucket = cache.size_bucket(value)
            low = bucket // 2 if bucket > 1 else None  # bucket b holds the sizes in (b / 2, b]; bucket 1 all <= 1
            bound = f"{low} < a{j} <= {bucket}" if low is not None else f"a{j} <= 1"
            lines.append(f"    if a{j}.__class__ is not int or not {bound}: return MISS")
        elif names is None:
            lines.append(f"    if a{j}.__class__ is not _c{j}: return MISS")
    lines.append(f"    if {where} != {_call_device(tuned, args)}: return MISS")
    lines += ["    _tuned.last_report = _report", "    return _launch(_script, args, _no_keywords)"]
    exec(compile("\n".join(lines), f"<winner guard of {tuned.cls.__name__}>", "exec"), namespace)
    return namespace["guard"]


def _fast_key(tuned, count: int):
    """The key function of calls of ``tuned`` with ``count`` positional arguments: ``key(args)`` returns
    the key, or None where the general path must decide (other Python types than
    ``int``/``float``/``bool`` for scalars, an integer where an array goes, a wrong count). Calls with equal
    keys have equal compile-time values, tuning key sizes and device, hence the same winner. Made once per
    count."""
    functions = tuned.__dict__.setdefault("_warpspec_key_functions", {})
    function = functions.get(count)
    if function is not None:
        return function
    from warpspec.frontend.kernel import parameters

    params = parameters(tuned.cls)
    names = getattr(tuned.cls, "tune_key", None)
    lines = ["def key(args):", f"    if len(args) != {count}: return None"]
    if count:
        lines.append(f"    {', '.join(f'a{j}' for j in range(count))}, = args")
    parts = []
    where, namespace = _device_text(tuned, count)
    for j, p in enumerate(params):
        value = f"a{j}" if j < count else f"_default{j}"
        if j >= count:
            namespace[f"_default{j}"] = p.default
        if not p.runtime:
            lines.append(f"    if {value}.__class__ is not {p.annotation.__name__}: return None")
            parts.append(value)
            continue
        if p.pointer:
            # An integer there would be part of the tuning key's sizes; the class keeps fake tensors (which
            # must not launch) apart from real ones.
            lines.append(f"    if {value}.__class__ is int or {value}.__class__ is bool: return None")
            parts.append(f"{value}.__class__")
        elif names is not None:
            if p.name in names:
                lines.append(f"    if {value}.__class__ is not int: return None")
                parts.append(_bucket_text(value))
        else:
            lines.append(f"    if {value}.__class__ is not int and {value}.__class__ is not float and "
                         f"{value}.__class__ is not bool: return None")
            parts.append(f"({_bucket_text(value)} if {value}.__class__ is int else {value}.__class__)")
    lines.append(f"    return ({', '.join(parts + [where])},)")
    exec(compile("\n".join(lines), f"<tuning key of {tuned.cls.__name__}>", "exec"), namespace)
    function = functions[count] = namespace["key"]
    return function


def _first_array(tuned, count: int) -> tuple[int, str] | None:
    """(position, name) of the first array parameter among a call's ``count`` positional arguments, or None."""
    from warpspec.frontend.kernel import parameters

    for j, p in enumerate(parameters(tuned.cls)[:count]):
        if p.pointer:
            return j, p.name
    return None


def _array_device(value, name: str) -> int | None:
    """The GPU index of array argument ``value``, or None for what is no GPU array (its launch says what is
    wrong with it)."""
    from warpspec.cuda.driver import array_device

    try:
        return array_device(value, name)
    except ArgumentError:
        return None


def _device_text(tuned, count: int) -> tuple[str, dict]:
    """The expression of generated code (over positional arguments ``a0, a1, ...``) that says which GPU a call
    launches on, and the names it uses: its first array's (launches follow their arrays, whatever the current
    device), else the current device."""
    found = _first_array(tuned, count)
    if found is None:
        return "_device()", {"_device": _device_getter()}
    j, name = found
    return f"_where(a{j}, {name!r})", {"_where": _array_device}


def _call_device(tuned, args: tuple) -> int:
    """The GPU a call with positional arguments ``args`` launches on (see ``_device_text``)."""
    found = _first_array(tuned, len(args))
    return _device_getter()() if found is None else _array_device(args[found[0]], found[1])


def _on_call_device(tuned, runtime: dict):
    """A context in which the current device is the GPU the call with runtime arguments ``runtime`` (by name)
    launches on: its first array's, else the current one."""
    from warpspec.cuda.driver import use_device
    from warpspec.frontend.kernel import parameters

    current = _device_getter()()
    for p in parameters(tuned.cls):
        if p.pointer and p.name in runtime:
            device = _array_device(runtime[p.name], p.name)
            return contextlib.nullcontext() if device in (None, current) else use_device(device)
    return contextlib.nullcontext()


def _device_getter():
    """The function that says which device launches go to: PyTorch's own getter once PyTorch runs CUDA (what
    ``default_device`` returns then, without its checks), else ``default_device``."""
    from warpspec.cuda.driver import default_device

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized() and hasattr(torch._C, "_cuda_getDevice"):
        return torch._C._cuda_getDevice
    return default_device


def _bucket_text(value: str) -> str:
    """``cache.size_bucket(value)`` written inline (a function call would cost more than the expression)."""
    return f"(1 if {value} <= 1 else 1 << ({value} - 1).bit_length())"


def _refuse_capture(tuned) -> None:
    """ArgumentError when PyTorch is capturing a CUDA graph on the current stream: tuning synchronises, allocates
    and launches many kernels, none of which may happen inside a capture."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
        raise ArgumentError(f"{tuned.cls.__name__} would have to be tuned for these arguments, but the current "
                            f"stream is capturing a CUDA graph; call it once with the same shapes before the "
                            f"capture (the winner is then reused), or pin a schedule")


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: What each field of a stored fate must hold (as JSON reads it back). A record that differs was edited or
#: damaged: printing its table or launching its winner would fail later, so it is not used.
_STORED_FATE = {
    "schedule": lambda value: isinstance(value, dict),
    "fate": lambda value: isinstance(value, str) and value in FATES,
    "reason": lambda value: isinstance(value, str),
    "build_s": lambda value: value is None or _number(value),
    "registers": lambda value: value is None or _count(value),
    "shared_bytes": lambda value: value is None or _count(value),
    "spill_bytes": lambda value: value is None or _count(value),
    "time_ms": lambda value: value is None or _number(value),
    "instructions": lambda value: isinstance(value, dict) and all(_count(count) for count in value.values()),
}


def _stored_fates(record: dict) -> list[ScheduleFate] | None:
    """The fates of a stored report, or None unless the record has exactly the fields a report needs, each of
    the right type."""
    fates = record.get("fates")
    if not (isinstance(record.get("kernel"), str) and _number(record.get("seconds")) and isinstance(fates, list)):
        return None
    if not all(isinstance(fate, dict) and fate.keys() == _STORED_FATE.keys()
               and all(check(fate[name]) for name, check in _STORED_FATE.items()) for fate in fates):
        return None
    return [ScheduleFate(**fate) for fate in fates]


def _cached_report(tuned, key: str, material: dict) -> TuningReport | None:
    """The stored report under ``key`` when it is well formed and its winner is still one of ``tuned``'s
    schedules."""
    record = cache.load(key, material)
    if record is None:
        return None
    fates = _stored_fates(record)
    if fates is None:
        return None
    report = TuningReport(record["kernel"], fates, key, True, record["seconds"])
    winner = report.winner
    # JSON turns tuples into lists: compare schedules the same way, and launch the Script's own values.
    stored = cache.as_json(winner.schedule) if winner else None
    schedule = next((s for s in tuned.schedules() if cache.as_json(s) == stored), None)
    if schedule is None:
        return None
    winner.schedule = schedule
    return report
