"""What README.md and docs/*.md show, checked against what warpspec does.

The error messages docs/language.md and docs/emulator.md quote are produced here by running kernels, and each quote
is read from its document, so a document that drifts from the code fails here; so do the README's commands, run
from the repository root as it says, and docs/cuda.md's listing of generated code. The kernels live in this file
(the front end reads kernel source from files). Messages name files by absolute path; the documents show them
relative to the repository root.
"""

import functools
import importlib
import importlib.util
import inspect
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.kernels import buggy_kernels as bk
from tests.kernels import cluster_kernels as ck
from tests.kernels import flag_kernels as fk
from tests.kernels import global_race_kernels as gk
import warpspec
from warpspec import BarrierError, BoundsError, CompileError, DeadlockError, KernelError, RaceError
from warpspec import cdiv, float16, float32, int32
from warpspec.cuda.codegen import generate
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.runtime import kernel_for
# emulator is imported as an autouse fixture: the deterministic schedule, so messages name exact lines
from tests.support.example_checks import emulator  # noqa: F401
from matmul_v3 import MatmulWGMMAV3
from matmul_v4 import MatmulWGMMAV4
from tests.isa.test_cluster import run_stream
from tests.emulator.test_planted_bugs import run_copy, run_matmul

REPO = Path(__file__).resolve().parents[1]
SRC = Path(warpspec.__file__).resolve().parents[1]  # the checkout under test, for subprocesses


# ------------------------------------------------------------------------------------------- reading documents


def document(name: str) -> str:
    """The text of README.md or docs/<name>."""
    return (REPO / name if name == "README.md" else REPO / "docs" / name).read_text()


def section(text: str, heading: str) -> str:
    """The text under the Markdown heading whose title is ``heading``, up to the next heading of its level or
    higher."""
    match = re.search(rf"^(#+) {re.escape(heading)}\n", text, re.MULTILINE)
    assert match, f"no heading {heading!r}"
    level = len(match.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.MULTILINE).search(text, match.end())
    return text[match.end():end.start() if end else len(text)]


#: A fenced code block: its language tag and body. A fence starts a line; the next fence closes it.
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


def code_blocks(text: str, language: str = "") -> list[str]:
    """The fenced code blocks of ``text`` tagged ``language`` (untagged ones for "")."""
    return [body for tag, body in FENCE.findall(text) if tag == language]


def prose(text: str) -> str:
    """``text`` with every run of whitespace one space: quotes wrapped over lines read as written."""
    return " ".join(text.split())


def quotes(text: str) -> list[str]:
    """The backticked spans outside code blocks of ``text`` that hold a phrase (a space), wrapped lines joined."""
    return [prose(q) for q in re.findall(r"`([^`]+)`", FENCE.sub("", text)) if " " in q.strip()]


def relative(text: str) -> str:
    """``text`` with this repository's absolute paths written from its root, as the documents show them."""
    return text.replace(f"{REPO}{os.sep}", "")


def quoted_in(quote: str, text: str) -> bool:
    """Whether ``quote`` occurs in ``text``, each ``...`` standing for any run of characters within a line."""
    pattern = ".+?".join(re.escape(part) for part in quote.split("..."))
    return re.search(pattern, text) is not None


def raised(run) -> warpspec.WarpspecError:
    """The warpspec error ``run()`` raises."""
    with pytest.raises(warpspec.WarpspecError) as caught:
        run()
    return caught.value


def message(error: warpspec.WarpspecError) -> str:
    """The first line of ``error`` without its location: what the documents quote after ``file:line:``."""
    first = str(error).splitlines()[0]
    return first[len(error.location) + 2:] if error.location and first.startswith(error.location) else first


# ---------------------------------------------------------------------------------------------------- kernels


class ClassConstant(warpspec.Script):
    """x *= 2 in tiles of BLOCK elements, BLOCK a class-level constant."""

    BLOCK = 64

    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = [cdiv(n, self.BLOCK)]
        self.attrs.warps = 2
        x = self.global_view(x_ptr, dtype=float32, shape=[n])
        offsets = [self.BLOCK * self.blockIdx.x]
        self.store_global(x, self.load_global(x, offsets=offsets, shape=[self.BLOCK]) * 2.0, offsets=offsets)


class PrivateClassConstant(ClassConstant):
    """Reads ``_HIDDEN`` from its class: names starting with ``_`` are not looked up there."""

    _HIDDEN = 3

    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = [self._HIDDEN]
        self.attrs.warps = 1


class StageBoundOutside(warpspec.Script):
    """docs/language.md's stage counter: a compile-time ``stage`` rebound inside a runtime loop."""

    def __call__(self, k_size: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        block_k = 16
        stage = 0                                  # compile-time 0
        for offset_k in self.range(0, k_size, block_k):
            stage = (stage + 1) % 2


class StageFromRuntime(warpspec.Script):
    """The same, with a runtime new value."""

    def __call__(self, k_size: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        block_k = 16
        stage = 0
        for offset_k in self.range(0, k_size, block_k):
            stage = offset_k // block_k % 2


class FailsAtCompileTime(warpspec.Script):
    """A compile-time call that raises."""

    def __call__(self, n: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        levels = math.log2(-1)


class Float16Scale(warpspec.Script):
    """A runtime scalar of a type no back end passes."""

    def __call__(self, scale: float16, x_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1


class ReturnInSingleThread(warpspec.Script):
    """A helper that returns from inside single_thread."""

    def first(self):
        with self.single_thread():
            return 1
        return 0

    def __call__(self, n: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        self.first()


class TileStoredByHalf(warpspec.Script):
    """A tile loaded by threads 0-63 and stored by threads 0-31 only."""

    def __call__(self, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 2
        x = self.global_view(x_ptr, dtype=float32, shape=[16, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[16, 64])
        x_tile = self.load_global(x, offsets=[0, 0], shape=[16, 64])
        with self.thread_group(thread_begin=0, num_threads=32):
            self.store_global(out, x_tile, offsets=[0, 0])


class ReadsOneElement(warpspec.Script):
    """out = x * x[1, 2]: an element read of a loaded (blocked) tile."""

    def __call__(self, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 2
        x = self.global_view(x_ptr, dtype=float32, shape=[16, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[16, 64])
        x_tile = self.load_global(x, offsets=[0, 0], shape=[16, 64])
        self.store_global(out, x_tile * x_tile[1, 2], offsets=[0, 0])


class SixteenGroupSyncs(warpspec.Script):
    """Each of 16 one-warp groups synchronises on its own: 16 named barriers."""

    def __call__(self, n: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 16
        for w in range(16):
            with self.thread_group(thread_begin=32 * w, num_threads=32):
                self.sync()


class Staged(warpspec.Script):
    """A 16x64 float16 tile ``s`` staged in shared memory by warp 0 (``body``), with one barrier ``b``."""

    def __call__(self, x_ptr: ~float16, y_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 2
        x = self.global_view(x_ptr, dtype=float16, shape=[16, 64])
        y = self.global_view(y_ptr, dtype=float16, shape=[16, 64])
        s = self.shared_tensor(dtype=float16, shape=[16, 64])
        b = self.mbarrier.alloc(counts=[1])
        self.body(x, y, s, b)


class ArrivesWithoutBytes(Staged):
    """The arrival on ``b[0]`` announces none of the load's bytes: the phase completes on it, before the load is
    issued, so the wait passes while the load may still be writing ``s``."""

    def body(self, x, y, s, b):
        with self.thread_group(thread_begin=0, num_threads=32):
            with self.single_thread():
                self.mbarrier.arrive(b[0])
                self.tma.global_to_shared(src=x, dst=s, offsets=[0, 0], mbarrier=b[0])
            self.mbarrier.wait(b[0], phase=0)
            self.load_shared(s)


class AnnouncesTooFewBytes(Staged):
    """The arrival on ``b[0]`` announces the bytes of one of the two loads that complete on it: the phase completes
    when the first lands, so the wait passes while the second may still be writing ``t``."""

    def body(self, x, y, s, b):
        t = self.shared_tensor(dtype=float16, shape=[16, 64])
        with self.thread_group(thread_begin=0, num_threads=32):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(b[0], transaction_bytes=s.nbytes)
                self.tma.global_to_shared(src=x, dst=s, offsets=[0, 0], mbarrier=b[0])
                self.tma.global_to_shared(src=y, dst=t, offsets=[0, 0], mbarrier=b[0])
            self.mbarrier.wait(b[0], phase=0)
            self.load_shared(t)


class ReadWhileCopying(Staged):
    """The second load into ``s`` is not waited for before ``s`` is read."""

    def body(self, x, y, s, b):
        with self.thread_group(thread_begin=0, num_threads=32):
            for lap in range(2):
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(b[0], transaction_bytes=s.nbytes)
                    self.tma.global_to_shared(src=x, dst=s, offsets=[0, 0], mbarrier=b[0])
                if lap == 0:
                    self.mbarrier.wait(b[0], phase=0)
            self.load_shared(s)


class ReadUnordered(Staged):
    """Warp 0 reads what warp 1 stored, with no barrier or sync between them (warp 1, the last to reach the sync
    after mbarrier.alloc, runs on first)."""

    def body(self, x, y, s, b):
        with self.thread_group(thread_begin=32, num_threads=32):
            self.store_shared(s, self.load_global(x, offsets=[0, 0], shape=[16, 64]))
        with self.thread_group(thread_begin=0, num_threads=32):
            self.load_shared(s)


class StoreWithoutFence(Staged):
    """A TMA store of ordinary stores' data without fence_proxy_async()."""

    def body(self, x, y, s, b):
        with self.thread_group(thread_begin=0, num_threads=32):
            self.store_shared(s, self.load_global(x, offsets=[0, 0], shape=[16, 64]))
            with self.single_thread():
                self.tma.shared_to_global(src=s, dst=y, offsets=[0, 0])
                self.tma.commit_group()
                self.tma.wait_group(0)


class TwoLoadsAtOnce(Staged):
    """Two TMA loads into ``s`` in flight together."""

    def body(self, x, y, s, b):
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(b[0], transaction_bytes=2 * s.nbytes)
            self.tma.global_to_shared(src=x, dst=s, offsets=[0, 0], mbarrier=b[0])
            self.tma.global_to_shared(src=x, dst=s, offsets=[0, 0], mbarrier=b[0])


class StoreNeverCommitted(Staged):
    """A TMA store with no tma.commit_group()."""

    def body(self, x, y, s, b):
        with self.thread_group(thread_begin=0, num_threads=32):
            self.store_shared(s, self.load_global(x, offsets=[0, 0], shape=[16, 64]))
            self.fence_proxy_async()
            with self.single_thread():
                self.tma.shared_to_global(src=s, dst=y, offsets=[0, 0])


class ArriveTwice(Staged):
    """Two arrivals on a one-arrival barrier with no wait between them."""

    def body(self, x, y, s, b):
        with self.single_thread():
            self.mbarrier.arrive(b[0])
            self.mbarrier.arrive(b[0])


class TooManyBytes(warpspec.Script):
    """Two declarations of 2^20 - 1 bytes on one phase of a two-arrival barrier."""

    def __call__(self, n: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        b = self.mbarrier.alloc(counts=[2])
        with self.single_thread():
            for _ in range(2):
                self.mbarrier.arrive_and_expect_tx(b[0], transaction_bytes=2**20 - 1)


class RuntimePhase(warpspec.Script):
    """A wait whose parity is a runtime parameter."""

    def __call__(self, phase: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        b = self.mbarrier.alloc(counts=[1])
        self.mbarrier.wait(b[0], phase=phase)


class Divides(warpspec.Script):
    """x[0] = n // d at run time."""

    def __call__(self, n: int32, d: int32, x_ptr: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        x = self.global_view(x_ptr, dtype=int32, shape=[1])
        q = self.register_tensor(dtype=int32, shape=[1], init=0)
        q[0] = n // d
        self.store_global(x, q, offsets=[0])


class Shifts(warpspec.Script):
    """x[0] = n << d at run time."""

    def __call__(self, n: int32, d: int32, x_ptr: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        x = self.global_view(x_ptr, dtype=int32, shape=[1])
        q = self.register_tensor(dtype=int32, shape=[1], init=0)
        q[0] = n << d
        self.store_global(x, q, offsets=[0])


class CountsUpTo(warpspec.Script):
    """A runtime loop from ``start`` to ``stop`` in steps of 64, counting its trips into x[0]."""

    def __call__(self, start: int32, stop: int32, x_ptr: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        x = self.global_view(x_ptr, dtype=int32, shape=[1])
        q = self.register_tensor(dtype=int32, shape=[1], init=0)
        for _ in self.range(start, stop, 64):
            q[0] = q[0] + 1
        self.store_global(x, q, offsets=[0])


class Multiply(warpspec.Script):
    """One warpgroup loads a 64x16 A and B with TMA and computes C = A·Bᵀ (``multiply``, ``finish``)."""

    def __call__(self, a_ptr: ~float16, b_ptr: ~float16, c_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float16, shape=[64, 16])
        gb = self.global_view(b_ptr, dtype=float16, shape=[64, 16])
        gc = self.global_view(c_ptr, dtype=float16, shape=[64, 64])
        sa = self.shared_tensor(dtype=float16, shape=[64, 16])
        sb = self.shared_tensor(dtype=float16, shape=[64, 16])
        full = self.mbarrier.alloc(counts=[1])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        with self.thread_group(thread_begin=0, num_threads=128):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(full[0], transaction_bytes=sa.nbytes + sb.nbytes)
                self.tma.global_to_shared(src=ga, dst=sa, offsets=[0, 0], mbarrier=full[0])
                self.tma.global_to_shared(src=gb, dst=sb, offsets=[0, 0], mbarrier=full[0])
            self.mbarrier.wait(full[0], phase=0)
            self.multiply(sa, sb, acc)
            self.finish(gc, acc)

    def multiply(self, sa, sb, acc):
        self.wgmma.fence()
        self.wgmma.mma(sa, sb.transpose(), acc)
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)

    def finish(self, gc, acc):
        self.store_global(gc, self.cast(acc, float16), offsets=[0, 0])


class MultiplyWithoutFence(Multiply):
    """No wgmma.fence() before the mma, after init wrote acc."""

    def multiply(self, sa, sb, acc):
        self.wgmma.mma(sa, sb.transpose(), acc)
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)


class MultiplyNeverCommitted(Multiply):
    """The mma is never committed, and acc never read."""

    def multiply(self, sa, sb, acc):
        self.wgmma.fence()
        self.wgmma.mma(sa, sb.transpose(), acc)

    def finish(self, gc, acc):
        pass


class CastBeforeWait(Multiply):
    """acc is cast while the mma into it is still in flight."""

    def multiply(self, sa, sb, acc):
        self.wgmma.fence()
        self.wgmma.mma(sa, sb.transpose(), acc)
        self.wgmma.commit_group()


def tile(dtype=np.float16, shape=(16, 64)):
    """A small input tile."""
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


def staged(kernel):
    """A run of a ``Staged`` kernel on a random tile."""
    return lambda: kernel()(tile(), np.zeros((16, 64), np.float16))


def multiplied(kernel):
    """A run of a ``Multiply`` kernel on random operands."""
    return lambda: kernel()(tile(shape=(64, 16)), tile(shape=(64, 16)), np.zeros((64, 64), np.float16))


#: Runs that raise the kernel errors docs/emulator.md's "Every check" quotes, named for the rule they break.
EMULATOR_CHECKS = {
    "expect-too-many-bytes": lambda: run_matmul(bk.ExpectTooManyBytes()),
    "consumer-phase-one": lambda: run_matmul(bk.ConsumerStartsAtPhaseOne()),
    "read-while-copying": staged(ReadWhileCopying),
    "arrival-without-bytes": staged(ArrivesWithoutBytes),
    "announces-too-few-bytes": staged(AnnouncesTooFewBytes),
    "read-unordered": staged(ReadUnordered),
    "store-without-fence": staged(StoreWithoutFence),
    "release-before-wgmma-wait": lambda: run_matmul(bk.ReleaseBeforeWgmmaWait()),
    "two-loads-at-once": staged(TwoLoadsAtOnce),
    "cast-before-wait": multiplied(CastBeforeWait),
    "empty-count-64": lambda: run_matmul(bk.EmptyCountTooSmall()),
    "arrive-twice": staged(ArriveTwice),
    "wait-two-phases-behind": lambda: run_copy(bk.CopyWithLateMonitor(), n=320),
    "too-many-bytes": lambda: TooManyBytes()(0),
    "cluster-no-sync-after-init": lambda: run_stream(ck.NoSyncAfterInit()),
    "cluster-no-sync-before-exit": lambda: run_stream(ck.NoSyncBeforeExit()),
    "cluster-expects-half": lambda: run_stream(ck.ExpectsHalf()),
    "cluster-rank-outside": lambda: run_stream(ck.ReleasesPastTheCluster()),
    "cluster-leaving-partner": lambda: ck.LeavingPartner()(64, 64, *[np.zeros((64, 64), np.float16) for _ in "xy"]),
    "runtime-phase": lambda: RuntimePhase()(2),
    "leftover-transaction-count": lambda: run_copy(bk.CopyReleaseWithExpectTx(), n=128),
    "stage-never-wraps": lambda: run_matmul(bk.StageNeverWraps()),
    "phases-one-short": lambda: run_matmul(bk.PhasesOneShort()),
    "mma-without-fence": multiplied(MultiplyWithoutFence),
    "mma-never-committed": multiplied(MultiplyNeverCommitted),
    "store-never-committed": staged(StoreNeverCommitted),
    "divides-by-zero": lambda: Divides()(1, 0, np.zeros(1, np.int32)),
    "divides-smallest-by-minus-one": lambda: Divides()(-2**31, -1, np.zeros(1, np.int32)),
    "shifts-by-a-negative-amount": lambda: Shifts()(1, -1, np.zeros(1, np.int32)),
    "loop-wraps-its-counter": lambda: CountsUpTo()(2**31 - 100, 2**31 - 1, np.zeros(1, np.int32)),
    "blocks-overlap": lambda: gk.MoveRows()(32, 16, 16, 0, *overlapping_rows()),
    "tma-store-read-back": lambda: gk.StoreThenRead(wait=False, tma_reader=False)(
        *[np.zeros((64, 64), np.float16) for _ in range(3)]),
    "store-into-reduce-adds": lambda: gk.ReduceTiles("store")(2, 64, np.ones((2, 64, 64), np.float32),
                                                              np.zeros((64, 64), np.float32)),
    "read-back-reduce-adds": lambda: gk.ReduceTiles("read-back")(2, 64, np.ones((2, 64, 64), np.float32),
                                                                 np.zeros((64, 64), np.float32)),
    "flag-waits-for-a-later-block": lambda: running_sum(fk.RunningSum(wait_for="next")),
    "flag-signal-before-sync": lambda: running_sum(fk.RunningSum(sync_before_signal=False)),
    "flag-left-set": lambda: running_sum(fk.RunningSum(reset=False), launches=2),
}


def running_sum(kernel, launches=1):
    """tests/kernels/flag_kernels.py's chain over 4 blocks, ``launches`` times with the same flags."""
    x = np.ones((4 * fk.ROWS, 64), np.float32)
    ws, out, flags = np.zeros_like(x), np.zeros_like(x), np.zeros(4, np.int32)
    for _ in range(launches):
        kernel(4, x, ws, flags, out)


def overlapping_rows():
    """x is rows 0-31 and out rows 8-39 of one array (tests/emulator/test_global_races.py's overlapping slices)."""
    memory = np.arange(40 * 64, dtype=np.float32).reshape(40, 64)
    return memory[:32], memory[8:]


@functools.cache
def emulator_error(name: str) -> KernelError:
    """The KernelError of ``EMULATOR_CHECKS[name]``, run once."""
    error = raised(EMULATOR_CHECKS[name])
    assert isinstance(error, KernelError), f"{name}: {type(error).__name__}: {error}"
    return error


CHECK_CLASSES = (DeadlockError, RaceError, BarrierError, BoundsError, KernelError)
EMULATOR_QUOTES = [
    pytest.param(cls, quote, id=f"{cls.__name__}-{number}")
    for cls in CHECK_CLASSES
    for number, quote in enumerate(quotes(section(document("emulator.md"), cls.__name__)))
]


# ------------------------------------------------------------------------------------------------------ tests


def test_a_kernel_reads_class_level_constants():
    """``self.BLOCK`` finds ``BLOCK = 64`` in the class body, as docs/language.md says."""
    x = np.arange(100, dtype=np.float32)
    ClassConstant()(100, x)  # two blocks of 64, the second ragged
    np.testing.assert_array_equal(x, 2 * np.arange(100, dtype=np.float32))
    assert "`BLOCK = 64` in the class body makes `self.BLOCK` the compile-time 64" in prose(document("language.md"))


def test_private_class_attributes_are_not_found():
    """``self._HIDDEN`` is refused although the class defines it, as docs/language.md says."""
    error = raised(lambda: PrivateClassConstant()(1, np.zeros(1, np.float32)))
    assert isinstance(error, CompileError) and "self._HIDDEN is neither part of the language" in str(error)
    assert "Names that start with `_` are not looked up on the class" in prose(document("language.md"))


def test_the_stage_example_fails_with_the_quoted_message():
    """docs/language.md's rebinding example is StageBoundOutside's body, and its comment quotes the real error."""
    (example,) = code_blocks(section(document("language.md"), "Values bound outside a runtime loop or branch"),
                             "python")
    lines, first = inspect.getsourcelines(StageBoundOutside.__kernel__)
    kernel = [line.split("#")[0].strip() for line in lines]
    code = [line.split("#")[0].strip() for line in example.splitlines()]
    assert all(line in kernel for line in code if line)
    quote = prose(" ".join(line.split("#")[-1] for line in example.splitlines()[2:]))
    assert quote.startswith("CompileError: ")
    error = raised(lambda: StageBoundOutside()(64))
    assert isinstance(error, CompileError)
    rebinding = first + kernel.index("stage = (stage + 1) % 2")
    assert error.location == f"{__file__}:{rebinding}"
    assert message(error) == quote[len("CompileError: "):]


def v3_past_shared_memory():
    """Builds the V3 schedule whose stages do not fit in shared memory."""
    kernel_for(MatmulWGMMAV3(num_stages=4, block_m=256, block_n=256, block_k=64), {"n_size": 256, "k_size": 256})


#: Errors whose message (after ``file:line: ``) a document quotes word for word.
QUOTED_MESSAGES = [
    pytest.param("language.md", lambda: StageFromRuntime()(64), id="stage-from-runtime"),
    pytest.param("language.md", lambda: FailsAtCompileTime()(1), id="fails-at-compile-time"),
    pytest.param("language.md", lambda: Float16Scale()(1.0, np.zeros(1, np.float32)), id="float16-scalar"),
    pytest.param("language.md", lambda: ReturnInSingleThread()(1), id="return-in-single-thread"),
    pytest.param("language.md", v3_past_shared_memory, id="shared-memory-limit"),
    pytest.param("language.md", lambda: TileStoredByHalf()(tile(np.float32), tile(np.float32)),
                 id="store-by-a-subset"),
    pytest.param("language.md", lambda: kernel_for(SixteenGroupSyncs(), {}), id="named-barriers"),
    pytest.param("language.md", lambda: kernel_for(ReadsOneElement(), {}), id="element-read"),
]


@pytest.mark.parametrize("name, run", QUOTED_MESSAGES)
def test_quoted_compile_errors_are_the_real_ones(name, run):
    """The message after ``file:line: `` appears word for word in the document."""
    error = raised(run)
    assert isinstance(error, CompileError), f"{type(error).__name__}: {error}"
    assert prose(message(error)) in prose(document(name)), message(error)


def test_element_reads_and_named_barriers_are_refused_on_the_emulator_too():
    """The language refuses them for both back ends: the emulator does not run what the GPU code could not do."""
    with pytest.raises(CompileError, match="elements of x_tile are spread over threads"):
        ReadsOneElement()(tile(np.float32), tile(np.float32))
    with pytest.raises(CompileError, match="would be the 16th distinct thread group to sync"):
        SixteenGroupSyncs()(1)


def test_the_quoted_error_with_its_location_is_the_real_one():
    """docs/language.md's example of a CompileError inside an inlined helper, location chain included."""
    error = raised(lambda: run_matmul(bk.UnknownName()))
    assert isinstance(error, CompileError)
    assert relative(str(error)) in quotes(section(document("language.md"), "Errors"))


def test_the_location_chain_example_is_the_real_one():
    """docs/emulator.md's example of a location inside a helper is ExpectTooManyBytes' deadlock."""
    error = emulator_error("expect-too-many-bytes")
    assert relative(error.location) in quotes(section(document("emulator.md"), "Every check"))


@pytest.mark.parametrize("error_class, quote", EMULATOR_QUOTES)
def test_every_quoted_emulator_check_is_a_real_message(error_class, quote):
    """Each fragment under "Every check" comes from an error of its heading's class ("..." stands for names)."""
    produced = [emulator_error(name) for name in EMULATOR_CHECKS]
    texts = [relative(str(e)) for e in produced if type(e) is error_class]
    assert any(quoted_in(quote, text) for text in texts), f"{quote!r} is not in any {error_class.__name__}"


@pytest.mark.parametrize("name", EMULATOR_CHECKS)
def test_every_emulator_check_kernel_is_quoted(name):
    """Each kernel above shows one of the quoted fragments: none is here for nothing."""
    error = emulator_error(name)
    own = quotes(section(document("emulator.md"), type(error).__name__))
    assert any(quoted_in(quote, relative(str(error))) for quote in own), relative(str(error))


def test_the_unrolled_listing_is_generated_code():
    """docs/cuda.md's V3 producer loop: every line shown is in the generated source, in order."""
    text = document("cuda.md")
    (listing,) = code_blocks(section(text, "Unrolled loops and constant propagation"), "cpp")
    script = MatmulWGMMAV3(num_stages=2, block_m=128, block_n=128, block_k=64)
    generated = [line.strip() for line in relative(generate(kernel_for(
        script, {"n_size": 8192, "k_size": 8192})).source).splitlines()]
    shown = [line.strip() for line in listing.splitlines() if line.strip() != "..."]
    at = 0
    for line in shown:
        assert line in generated[at:], f"{line!r} is not in the generated code after line {at}"
        at = generated.index(line, at) + 1
    drain = "((0 * 2 + stage) == 0 ? producer_phases[0] : producer_phases[1])"
    assert drain in section(text, "Unrolled loops and constant propagation")
    assert any(drain in line for line in generated)


def run_from_repository_root(*arguments: str) -> subprocess.CompletedProcess:
    """``python ARGUMENTS`` from the repository root with this checkout's warpspec, as a README reader runs it."""
    env = {k: v for k, v in os.environ.items() if k not in (SEED_VARIABLE, "WARPSPEC_BACKEND")}
    env["PYTHONPATH"] = str(SRC)
    return subprocess.run([sys.executable, *arguments], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_readme_check_command_runs_from_the_repository_root():
    """The README's `warpspec check` command, run where it says, prints what it shows (timings aside)."""
    readme = document("README.md")
    assert "runs from the repository root" in prose(readme)
    (block,) = [b for b in code_blocks(section(readme, "Three ways to run a kernel")) if "warpspec check" in b]
    command, *expected = block.splitlines()
    result = run_from_repository_root("-m", "warpspec.cli", *command.removeprefix("$ warpspec ").split())
    assert result.returncode == 0, result.stderr
    times = re.compile(r"\(\d+\.\d+ s,")
    assert [times.sub("(T s,", line) for line in result.stdout.splitlines()] == \
        [times.sub("(T s,", line) for line in expected]


def test_the_readme_emulator_snippet_runs_from_the_repository_root():
    """The snippet imports V3 from examples/ through its own sys.path entry; C must then be A·Bᵀ."""
    (snippet,) = [b for b in code_blocks(section(document("README.md"), "Three ways to run a kernel"), "python")
                  if 'use_backend("emulator")' in b]
    check = ("reference = a.astype(np.float32) @ b.astype(np.float32).T\n"
             "print(np.linalg.norm(c.astype(np.float32) - reference) / np.linalg.norm(reference))\n")
    result = run_from_repository_root("-c", snippet + check)
    assert result.returncode == 0, result.stderr
    assert float(result.stdout) < 1e-2  # fp16 inputs and output, fp32 accumulation


def test_generated_comments_carry_the_call_chain():
    """docs/cuda.md's example comment is in V4's generated code: a Pipeline line with its call site."""
    code_generation = quotes(section(document("cuda.md"), "Code generation"))
    (comment,) = [q for q in code_generation if q.startswith("// ") and " -> " in q]
    script = MatmulWGMMAV4(num_stages=2, block_m=256, block_n=128, block_k=64)
    source = generate(kernel_for(script, {"n_size": 512, "k_size": 512})).source
    assert comment in [line.strip() for line in relative(source).splitlines()]


DOCUMENTS = ["README.md", *sorted(p.name for p in (REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_path_a_document_names_exists(name):
    """Repository paths (``src/warpspec/...``, ``tests/...``, ``examples/...``, and package-relative
    ``cuda/sm90/prelude.py``-style module paths) name files that exist; ``<family>`` stands for any."""
    text = document(name)
    paths = re.findall(r"\b(?:src/warpspec|tests|examples|benchmarks|docs)/[\w./-]*\w", text)
    modules = re.findall(r"(?<![\w/])((?:cuda|passes|isa|emulator|frontend|ir|layout|tune)/[\w/]+\.py)", text)
    missing = [p for p in paths if not (REPO / p).exists()]
    missing += [m for m in modules if not (SRC / "warpspec" / m).exists()]
    assert not missing, missing


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_dotted_name_a_document_names_exists(name):
    """``warpspec.x.y`` names a module, or an attribute of one, that exists."""
    missing = []
    for dotted in set(re.findall(r"\bwarpspec(?:\.[A-Za-z_]\w*)+", document(name))):
        if dotted.startswith("warpspec.torch_ops") and importlib.util.find_spec("torch") is None:
            # The module needs the optional torch: check its source defines the names instead.
            source = (SRC / "warpspec" / "torch_ops.py").read_text()
            missing += [part for part in dotted.split(".")[2:] if not re.search(rf"^(def|class) {part}\b|^{part} =",
                                                                              source, re.M)]
            continue
        parts = dotted.split(".")
        for split in range(len(parts), 0, -1):
            try:
                found = importlib.import_module(".".join(parts[:split]))
                break
            except ModuleNotFoundError:
                continue
        for attribute in parts[split:]:
            try:
                found = getattr(found, attribute, None)
            except ModuleNotFoundError as error:  # an export loaded at its first use needs the optional torch
                assert error.name == "torch" and attribute in getattr(found, "__all__", ()), dotted
                break
        if found is None:
            missing.append(dotted)
    assert not missing, missing


def test_the_readme_layout_lists_existing_files():
    """Every folder and module in the README's Layout exists, the new isa/ and passes/ among them."""
    (layout,) = code_blocks(section(document("README.md"), "Layout"))
    entries = []
    for line in layout.splitlines():
        first = line.split()[0] if line.strip() else ""
        if first.endswith(("/", ".py")):
            entries.append(first if not line.startswith(" ") else f"src/warpspec/{first}")
    assert "src/warpspec/isa/" in entries and "src/warpspec/passes/" in entries
    assert not [e for e in entries if not (REPO / e).exists()]
