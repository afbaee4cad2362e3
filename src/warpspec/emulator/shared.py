"""Shared memory with a shadow state per element, which the race checks read and update.

For every element: whether a completed write has filled it, which async operation is writing it now, how many
async operations are reading it now, the last ordinary (or completed async) writer with its epoch, each task's last
read of it (ordinary, or an async read once its wait observed it) with its epoch, and whether an ordinary write
still needs ``fence_proxy_async`` before the async proxy may read it. A write must be ordered after every other
task's last read, not only the latest reader's: two warpgroups' WGMMAs reading one stage and retiring in either
order must both be ordered before the stage is written again, whichever schedule ran.
"""

from __future__ import annotations

import numpy as np

from warpspec.errors import RaceError
from warpspec.ir import nodes as ir

NOBODY = -1


class SharedTensor:
    """One ``shared_tensor`` of the kernel: its data and its shadow."""

    def __init__(self, decl: ir.TensorDecl):
        self.decl = decl
        shape = decl.shape
        self.data = np.zeros(shape, dtype=decl.dtype.numpy)
        self.written = np.zeros(shape, dtype=bool)
        self.async_writer = np.zeros(shape, dtype=np.int64)  # id of the in-flight async write, 0 if none
        self.async_readers = np.zeros(shape, dtype=np.int32)  # number of in-flight async reads
        self.write_task = np.full(shape, NOBODY, dtype=np.int32)
        self.write_epoch = np.zeros(shape, dtype=np.int64)
        #: task index -> the epochs of that task's last read of each element (0: not read), made at its first read
        self.read_epochs: dict[int, np.ndarray] = {}
        self.unfenced = np.zeros(shape, dtype=bool)
        # In-flight async write id -> (the mbarrier it completes on, that barrier's last passing wait per task when
        # the copy was issued: a wait since then that did not block passed on a stale parity; the barrier's phase
        # then, and where the copy was issued).
        self.copy_barriers: dict[int, tuple[object, dict, int, str]] = {}


class Region:
    """A part of a shared tensor named by a kernel expression such as ``sa[1]``; ``key`` indexes its arrays."""

    def __init__(self, tensor: SharedTensor, key: tuple, text: str):
        self.tensor, self.key, self.text = tensor, key, text

    def view(self, name: str) -> np.ndarray:
        return getattr(self.tensor, name)[self.key]

    def part(self, rows: tuple[int, int]) -> "Region":
        """Rows ``[rows[0], rows[1])`` of this region (what one partition of a group wrote)."""
        return Region(self.tensor, self.key + (slice(rows[0], rows[1]),), self.text)

    def columns(self, columns: tuple[int, int]) -> "Region":
        """Columns ``[columns[0], columns[1])`` of this 2-D region (what one partition wrote through a transposed
        view)."""
        return Region(self.tensor, self.key + (slice(None), slice(columns[0], columns[1])), self.text)

    # ------------------------------------------------------------------------------------------------ checks

    def check_readable(self, task, what: str, async_proxy: bool) -> None:
        """Raise RaceError unless every element has been filled by a completed write ordered before ``task``."""
        writers = self.view("async_writer")
        if not self.view("written").all():
            raise RaceError(f"{what} reads {self.text}, which holds elements that no completed write has filled "
                            f"(never written, or an async copy into it has not been waited for)"
                            f"{self._copy_hint(task, writers)}")
        if writers.any():
            hint = self._copy_hint(task, writers) or "; wait on the copy's mbarrier first"
            raise RaceError(f"{what} reads {self.text} while an async copy is still writing it{hint}")
        self._check_ordered(task, "write_task", "write_epoch", what, "wrote")
        if async_proxy and self.view("unfenced").any():
            raise RaceError(f"{what} reads {self.text} through the async proxy after ordinary stores to it with no "
                            f"fence_proxy_async() in between")

    def _copy_hint(self, task, writers: np.ndarray) -> str:
        """What to do about the async copy still writing this region (``writers``: its async_writer ids): wait on
        the copy's mbarrier, or, when ``task``'s last wait on that barrier passed on a phase completed before the
        copy's, why: a phase with no bytes announced, a phase that completed before its own copies landed (too few
        bytes announced), or a stale parity (which phase that wait expected and which phase the barrier is in
        now)."""
        ids = [int(i) for i in np.unique(writers) if i and int(i) in self.tensor.copy_barriers]
        if not ids:
            return ""
        bar, seen_at_issue, issued_in, issued_at = self.tensor.copy_barriers[ids[0]]
        current = f"{bar.name}'s current phase {bar.completed} (parity {bar.completed & 1})"
        seen = bar.seen.get(task.index)
        if seen is None or seen == seen_at_issue.get(task.index) or seen[0] != bar.completed:
            return f"; the copy completes {current}: wait on {bar.name} with phase={bar.completed & 1} first"
        if bar.completed and bar.completed_without_bytes is not None:
            # The wait's phase is the right one, but it completed on its arrivals alone, before the copy was issued.
            return (f"; the last mbarrier.wait on {bar.name} by these threads passed phase {bar.completed - 1}, "
                    f"which completed on its arrivals alone, with no transaction bytes announced (its last "
                    f"arrival: {bar.completed_without_bytes}), so the copy, issued after, completes {current}: "
                    f"announce the copy's bytes on that arrival (mbarrier.arrive_and_expect_tx) so that the phase "
                    f"waits for them")
        if issued_in < bar.completed:
            # Issued in a phase that then completed without it: that phase announced fewer bytes than its copies.
            return (f"; the copy (issued at {issued_at}) was issued in phase {issued_in} of {bar.name}, which "
                    f"completed before the copy landed: the bytes that phase's arrivals announced (mbarrier.arrive_and_expect_tx) are fewer "
                    f"than its copies deliver, so this one completes {current} instead; announce the bytes of every "
                    f"copy that completes on {bar.name}")
        if bar.completed:
            passed = (f"phase={(bar.completed - 1) & 1}, which phase {bar.completed - 1} of {bar.name} had already "
                      f"completed")
        else:
            passed = f"phase=1, which a fresh barrier passes at once (no phase of {bar.name} has completed)"
        return (f"; the last mbarrier.wait on {bar.name} by these threads passed with {passed}, but the copy "
                f"completes {current}: that wait expected the wrong phase, and must use phase={bar.completed & 1} "
                f"here")

    def check_writable(self, task, what: str) -> None:
        """Raise RaceError if in-flight async operations or unordered accesses of other tasks touch the region."""
        if self.view("async_readers").any():
            raise RaceError(f"{what} writes {self.text} while an asynchronous read of it (a wgmma or a TMA store) is "
                            f"still in flight; wait for it (wgmma.wait_group / tma.wait_group) before releasing the "
                            f"buffer")
        if self.view("async_writer").any():
            raise RaceError(f"{what} writes {self.text} while another async copy is still writing it")
        self._check_ordered(task, "write_task", "write_epoch", what, "wrote")
        for other, epochs in self.tensor.read_epochs.items():
            if other != task.index and task.clock[other] < epochs[self.key].max():
                self._unordered(task, other, what, "read")

    def _check_ordered(self, task, task_field: str, epoch_field: str, what: str, verb: str) -> None:
        owners = self.view(task_field)
        epochs = self.view(epoch_field)
        for other in np.unique(owners):
            if other == NOBODY or other == task.index:
                continue
            latest = epochs[owners == other].max()
            if task.clock[other] < latest:
                self._unordered(task, other, what, verb)

    def _unordered(self, task, other: int, what: str, verb: str) -> None:
        raise RaceError(f"{what} touches {self.text}, which {task.machine.cluster.tasks[other].name} {verb} without "
                        f"a barrier wait or sync ordering it before this access")

    # --------------------------------------------------------------------------------------------- updates

    def record_read(self, task) -> None:
        epochs = self.tensor.read_epochs.get(task.index)
        if epochs is None:
            epochs = self.tensor.read_epochs[task.index] = np.zeros(self.tensor.decl.shape, dtype=np.int64)
        epochs[self.key] = task.clock[task.index]

    def record_write(self, task_index: int, epoch: int, unfenced: bool = False) -> None:
        self.view("written")[...] = True
        self.view("write_task")[...] = task_index
        self.view("write_epoch")[...] = epoch
        self.view("unfenced")[...] = unfenced
