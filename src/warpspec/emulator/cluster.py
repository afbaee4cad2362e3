"""Thread-block clusters on the emulator: the blocks of one cluster run together, and what one block may do to
another's shared memory and barriers.

``emulate_kernel`` runs the grid cluster after cluster. The blocks of a cluster are ``BlockMachine``s joined to one
``ClusterMachine``: one scheduler runs every task of every block (with a seed, interleaved at random across blocks
too), one list holds every block's asynchronous operations, and task indices count every task of the cluster, so
vector clocks order accesses across blocks as within one. Each block keeps its own shared memory and barriers.

Another block's barriers and shared memory are reached by a remote ``mbarrier.arrive(cta=rank)`` and by TMA
multicast. Each such access is checked here:

* the rank must lie inside the cluster (``BoundsError``);
* the target barrier's ``mbarrier.alloc`` must be ordered before the access: it ran in the target block and a
  cluster barrier (``cluster_sync``) passed in between, else the signal may reach an uninitialised barrier
  (``BarrierError``);
* the target block must not have exited, and when it exits, every access into it must be ordered before its end
  (its threads waited for the arrivals or copies, or a final ``cluster_sync``), and no multicast into it may still
  be in flight (``RaceError``): a block's shared memory and barriers are gone once its threads have exited;
* no copy a block issued may be in flight when its threads have all exited (``InFlightAtExitError`` at the copy's
  line): a TMA store not waited for by ``tma.wait_group``, or a TMA load whose barrier nobody waits on.
"""

from __future__ import annotations

from warpspec.emulator.clocks import join
from warpspec.errors import BarrierError, BoundsError, InFlightAtExitError, RaceError
from warpspec.isa.tma import TmaState

#: What a block's exit may not leave in flight, by event kind, and what waits for it.
_WAITED_BY = {"tma": "a wait on its mbarrier", "tma_store": "tma.commit_group and tma.wait_group(0)"}


class ClusterMachine:
    """The blocks of one cluster: ``size`` blocks of ``partitions`` tasks each, joined in rank order."""

    def __init__(self, size: int, partitions: int):
        self.size = size
        self.num_tasks = size * partitions  # the length of every vector clock
        self.machines: list = []  # BlockMachine by rank
        self.tasks: list = []  # every block's tasks, by Task.index
        self.events: list = []  # every block's asynchronous operations in flight
        self.barrier: dict = {"arrived": set(), "generation": 0}  # the cluster barrier's state (cluster_sync)
        self.exited: set[int] = set()  # ranks whose threads have all finished
        self.incoming: dict[int, list] = {}  # rank -> multicast events that write into that block
        self.accesses: dict[int, dict] = {}  # rank -> task index -> (epoch, what, loc) of its last access into it

    def join(self, machine) -> None:
        """Add the block of the next rank."""
        assert machine.rank == len(self.machines), "blocks join their cluster in rank order"
        self.machines.append(machine)
        self.tasks.extend(machine.tasks)

    # ------------------------------------------------------------------------------------ remote accesses

    def peer(self, task, rank: int, what: str):
        """The block of cluster rank ``rank`` that instruction ``what`` executed by ``task`` reaches."""
        if not 0 <= rank < self.size:
            raise BoundsError(f"{what}: cluster rank {rank} is outside the cluster of {self.size} block(s) (ranks "
                              f"0-{self.size - 1})")
        machine = self.machines[rank]
        if machine is not task.machine and rank in self.exited:
            raise RaceError(f"{what} by {task.name} reaches block rank {rank}, whose threads have all exited: its "
                            f"shared memory and barriers are gone; end the kernel with self.cluster_sync() so that "
                            f"no block exits while another may still access it")
        return machine

    def remote_barrier(self, task, rank: int, ref, what: str):
        """The mbarrier ``ref`` of block ``rank``, signalled by ``what`` executed by ``task``: its initialisation
        must be ordered before the signal. The access is recorded for the check at that block's exit."""
        machine = self.peer(task, rank, what)
        if machine is not task.machine:
            init = machine.barrier_inits.get(ref.decl.uid)
            if init is None or task.clock[init[0]] < init[1]:
                name = f"{ref.decl.name}[{task.machine.ev(task, ref.index[0])}]"
                raise BarrierError(f"{what} by {task.name} signals {name} of block rank {rank}, but that "
                                   f"block's mbarrier.alloc is not ordered before it (not run there yet, or no "
                                   f"cluster barrier in between): call self.cluster_sync() after mbarrier.alloc so "
                                   f"that every block's barriers are initialised before another block signals "
                                   f"them")
            self.record(task, rank, what)
        return task.machine.barrier(task, ref, machine)

    def record(self, task, rank: int, what: str) -> None:
        """``task`` accesses block ``rank`` now: that block's end must be ordered after this."""
        self.accesses.setdefault(rank, {})[task.index] = (task.clock[task.index], what, task.loc)

    def multicast(self, rank: int, event) -> None:
        """``event`` (a TMA multicast) writes into block ``rank`` when it completes."""
        self.incoming.setdefault(rank, []).append(event)

    # ------------------------------------------------------------------------------------------ block exit

    def finished(self, task) -> None:
        """``task`` ended; when it was its block's last, the block exits: check that nothing may still reach it."""
        machine = task.machine
        if any(t.state != "finished" for t in machine.tasks):
            return
        rank = machine.rank
        self.exited.add(rank)
        end = [0] * self.num_tasks
        for t in machine.tasks:
            join(end, t.clock)
        for event in self.events:
            # A multicast is its target block's to wait for; a store never committed has its own error at the end.
            uncommitted = event.task.family_state(TmaState).uncommitted
            if event.task.machine is machine and event.kind in _WAITED_BY and not any(
                    event in incoming for incoming in self.incoming.values()) and event not in uncommitted:
                raise InFlightAtExitError(f"the threads of the block have all exited while {event.text} (issued "
                                          f"by {event.task.name}) is still in flight: its copy may not have "
                                          f"happened when the block ends; wait for it first "
                                          f"({_WAITED_BY[event.kind]})", str(event.loc), machine.describe_tasks())
        for event in self.incoming.pop(rank, ()):
            if not event.done:
                raise RaceError(f"block rank {rank} exits while {event.text} (issued by {event.task.name}) may "
                                f"still write its shared memory and signal its barrier: wait on that barrier in "
                                f"block rank {rank}, or end the kernel with self.cluster_sync()", str(event.loc),
                                machine.describe_tasks())
        for index, (epoch, what, loc) in self.accesses.pop(rank, {}).items():
            if end[index] < epoch:
                raise RaceError(f"{what} by {self.tasks[index].name} reaches block rank {rank}, which may have "
                                f"exited by then: nothing orders this access before that block's end (its threads "
                                f"did not wait for it); end the kernel with self.cluster_sync(), or have that "
                                f"block wait for the arrivals", str(loc), machine.describe_tasks())
