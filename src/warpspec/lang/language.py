"""The language a kernel sees through ``self``: tensors, roles, and the Hopper instruction groups.

Each public method here runs inside the front end with already-evaluated arguments (Python values for compile-time
ones, IR Exprs for runtime scalars, ``TensorValue``s for tensors), checks where it is used, and emits IR. Their
docstrings are the language reference: which threads execute the instruction and the PTX it becomes.
"""

from __future__ import annotations

from warpspec.dtypes import DType, int32, uint32
from warpspec.frontend.values import RuntimeRange, TensorValue
from warpspec.ir import nodes as ir

WARPGROUP = 128


def language_call(function):
    """Mark a method as callable from kernels with runtime arguments (the front end passes them through)."""
    function._language_call = True
    return function


class LanguageObject:
    """Base of objects reachable from ``self`` in a kernel; holds the front end's builder."""

    def __init__(self, builder):
        self.b = builder

    def get_attribute(self, name: str):
        if name.startswith("_") or name == "b":
            raise self.b.error(f"{type(self).__name__.lower()} has no attribute {name!r}")
        try:
            return getattr(self, name)
        except AttributeError:
            raise self.b.error(f"{self.describe()} has no attribute {name!r}") from None

    def describe(self) -> str:
        return type(self).__name__


class Attrs(LanguageObject):
    """``self.attrs``: launch shape. ``blocks`` (1–3 sizes over runtime parameters), ``warps`` (compile-time),
    ``cluster_blocks`` (compile-time, 1–3 sizes)."""

    def __init__(self, builder):
        super().__init__(builder)
        self.blocks = None
        self.warps = None
        self.cluster_blocks = (1, 1, 1)

    def set_attribute(self, name: str, value) -> None:
        b = self.b
        if b.depth or b.groups:
            raise b.error(f"self.attrs.{name} must be set at the top level of the kernel, outside thread groups, "
                          f"loops and branches")
        if name == "blocks":
            sizes = list(value) if isinstance(value, (list, tuple)) else [value]
            if not 1 <= len(sizes) <= 3:
                raise b.error(f"self.attrs.blocks takes 1 to 3 sizes, got {len(sizes)}")
            exprs = []
            for size in sizes:
                expr = b.to_expr(size, int32, "self.attrs.blocks")
                for leaf in _leaves(expr):
                    if isinstance(leaf, (ir.Special, ir.Load)) or (
                            isinstance(leaf, ir.Var) and leaf not in b.param_vars):
                        raise b.error("self.attrs.blocks may only use kernel parameters and compile-time values")
                exprs.append(expr)
            self.blocks = tuple(exprs)
        elif name == "warps":
            warps = b.to_int(value, "self.attrs.warps")
            if not 1 <= warps <= 32:
                raise b.error(f"self.attrs.warps must be in [1, 32], got {warps}")
            if self.warps is not None and self.warps != warps:
                raise b.error("self.attrs.warps is set twice")
            self.warps = warps
            b.num_threads = warps * 32
        elif name == "cluster_blocks":
            sizes = list(value) if isinstance(value, (list, tuple)) else [value]
            sizes = [b.to_int(s, "self.attrs.cluster_blocks") for s in sizes]
            if not 1 <= len(sizes) <= 3 or any(s < 1 for s in sizes):
                raise b.error(f"self.attrs.cluster_blocks takes 1 to 3 positive sizes, got {sizes}")
            total = 1
            for s in sizes:
                total *= s
            if total > 16:
                raise b.error(f"a cluster holds at most 16 blocks (8 portably), got {total}")
            self.cluster_blocks = tuple(sizes + [1] * (3 - len(sizes)))
        else:
            raise b.error(f"self.attrs has no attribute {name!r}; use blocks, warps or cluster_blocks")


class Dim3(LanguageObject):
    """``self.blockIdx`` / ``self.gridDim``: ``.x``, ``.y``, ``.z`` as runtime int32 values, alike in all threads."""

    def __init__(self, builder, name):
        super().__init__(builder)
        self.name = name

    def get_attribute(self, name: str):
        if name not in ("x", "y", "z"):
            raise self.b.error(f"self.{self.name} has .x, .y and .z, not {name!r}")
        return ir.Special(f"{self.name}.{name}")


class Mbarrier(LanguageObject):
    """``self.mbarrier``: asynchronous barriers in shared memory with phase parity (PTX ``mbarrier.*``)."""

    #: The phase a producer first waits on an "empty" barrier with: a fresh barrier passes parity 1 at once.
    producer_initial_phase = 1
    #: The phase a consumer first waits on a "full" barrier with: parity 0 blocks until the first completion.
    consumer_initial_phase = 0

    @language_call
    def alloc(self, counts) -> TensorValue:
        """Create one mbarrier per entry of ``counts``, each expecting that many arrivals per phase.

        Executed by the whole block at the top level of the kernel: one thread runs ``mbarrier.init.shared::cta.b64``
        for each, then ``fence.mbarrier_init.release.cluster`` and a block barrier make them visible to all threads
        and to TMA. Returns a barrier array; index it (``barriers[stage]``) to name one barrier.
        """
        b = self.b
        if b.groups or b.depth:
            raise b.error("mbarrier.alloc must be called by the whole block, outside thread groups, loops and "
                          "branches")
        counts = list(counts) if isinstance(counts, (list, tuple)) else [counts]
        if not counts:
            raise b.error("mbarrier.alloc needs at least one count")
        values = tuple(b.to_int(c, "mbarrier.alloc count") for c in counts)
        for count in values:
            if not 1 <= count < 2**20:
                raise b.error(f"an mbarrier's arrival count must be in [1, 2^20 - 1], got {count}")
        decl = ir.TensorDecl(b.target_name("barriers"), ir.BARRIER, int32, (len(values),), b.loc)
        b.emit(ir.AllocBarriers(b.loc, decl, values))
        return TensorValue(ir.TensorRef(decl))

    def _barrier(self, value, what: str) -> ir.TensorRef:
        b = self.b
        if not isinstance(value, TensorValue) or value.kind != ir.BARRIER:
            raise b.error(f"{what} must be one mbarrier (e.g. barriers[stage]), got {_describe(value)}")
        if value.shape != ():
            raise b.error(f"{what} must be one mbarrier: index the barrier array {value.name}")
        return value.ref

    @language_call
    def arrive(self, barrier) -> None:
        """Every executing thread arrives once on ``barrier`` (a group of 128 threads gives 128 arrivals; one
        inside ``single_thread``). PTX: ``mbarrier.arrive.shared::cta.b64 _, [bar];`` (release, CTA scope)."""
        ref = self._barrier(barrier, "mbarrier.arrive barrier")
        self.b.emit(ir.MbarrierArrive(self.b.loc, self.b.threads(), ref))

    @language_call
    def arrive_and_expect_tx(self, barrier, transaction_bytes) -> None:
        """Every executing thread adds ``transaction_bytes`` to ``barrier``'s transaction count, then arrives once;
        the phase completes when all arrivals are in and the async copies have delivered those bytes.
        PTX: ``mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], bytes;``. Usually inside ``single_thread``."""
        ref = self._barrier(barrier, "mbarrier.arrive_and_expect_tx barrier")
        nbytes = self.b.to_expr(transaction_bytes, uint32, "transaction_bytes")
        if isinstance(nbytes, ir.Const) and not 0 <= nbytes.value < 2**20:
            raise self.b.error(f"transaction_bytes must be in [0, 2^20 - 1], got {nbytes.value}")
        self.b.emit(ir.MbarrierArriveExpectTx(self.b.loc, self.b.threads(), ref, nbytes))

    @language_call
    def wait(self, barrier, phase) -> None:
        """Block the executing threads until the phase of ``barrier`` with parity ``phase`` (0 or 1) has
        completed. PTX: a loop on ``mbarrier.try_wait.parity.shared::cta.b64 p, [bar], phase;`` (acquire)."""
        ref = self._barrier(barrier, "mbarrier.wait barrier")
        parity = self.b.to_expr(phase, uint32, "phase")
        if isinstance(parity, ir.Const) and parity.value not in (0, 1):
            raise self.b.error(f"mbarrier.wait phase must be 0 or 1, got {parity.value}")
        self.b.emit(ir.MbarrierWait(self.b.loc, self.b.threads(), ref, parity))


class Tma(LanguageObject):
    """``self.tma``: the Tensor Memory Accelerator's bulk tensor copies (PTX ``cp.async.bulk.tensor``)."""

    def _issuer(self, name: str) -> tuple[int, int]:
        b = self.b
        begin, count, single = b.group
        if not single and count != 32:
            raise b.error(f"tma.{name} is issued by one thread: call it inside self.single_thread() or from a "
                          f"thread group of exactly one warp (32 threads), not from {count} threads")
        return (begin, 1)

    def _offsets(self, offsets, view: TensorValue, what: str) -> tuple[ir.Expr, ...]:
        offsets = list(offsets) if isinstance(offsets, (list, tuple)) else [offsets]
        if len(offsets) != len(view.shape):
            raise self.b.error(f"{what}: {view.name} has {len(view.shape)} dimensions but {len(offsets)} offsets "
                               f"were given")
        return tuple(self.b.to_expr(o, int32, f"{what} offset") for o in offsets)

    def _box(self, shared: TensorValue, view: TensorValue, what: str) -> None:
        b = self.b
        if shared.ref.transposed:
            raise b.error(f"{what}: the shared tensor {shared.name} cannot be transposed")
        if len(shared.shape) != len(view.shape):
            raise b.error(f"{what}: shared tile {shared.name}{list(shared.shape)} and global view {view.name} "
                          f"({len(view.shape)} dimensions) must have the same rank")
        if shared.dtype != view.dtype:
            raise b.error(f"{what}: {shared.name} is {shared.dtype.name} but {view.name} is {view.dtype.name}")
        inner_bytes = shared.shape[-1] * shared.dtype.nbytes
        if inner_bytes % 16:
            raise b.error(f"{what}: the inner extent of {shared.name} is {inner_bytes} bytes; TMA needs a multiple "
                          f"of 16 bytes")

    @language_call
    def global_to_shared(self, src, dst, offsets, mbarrier) -> None:
        """Copy the tile of global view ``src`` starting at ``offsets`` into shared tensor ``dst``; the copy
        completes ``dst.nbytes`` transaction bytes on ``mbarrier``. Elements outside ``src`` read as zero.
        Issued by one thread (``single_thread`` or a one-warp group, which elects a lane). PTX:
        ``cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes [dst], [map, {..}], [bar];``
        """
        b = self.b
        threads = self._issuer("global_to_shared")
        src = b.to_tensor(src, "tma.global_to_shared src", (ir.GLOBAL,))
        dst = b.to_tensor(dst, "tma.global_to_shared dst", (ir.SHARED,))
        self._box(dst, src, "tma.global_to_shared")
        bar = Mbarrier._barrier(self, mbarrier, "tma.global_to_shared mbarrier")
        b.emit(ir.TmaLoad(b.loc, threads, src.ref, dst.ref, self._offsets(offsets, src, "tma.global_to_shared"),
                          bar))

    @language_call
    def shared_to_global(self, src, dst, offsets) -> None:
        """Copy shared tensor ``src`` into global view ``dst`` at ``offsets``; elements outside ``dst`` are not
        written. Issued by one thread; completion is tracked with ``commit_group``/``wait_group``. PTX:
        ``cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group [map, {..}], [src];``"""
        b = self.b
        threads = self._issuer("shared_to_global")
        src = b.to_tensor(src, "tma.shared_to_global src", (ir.SHARED,))
        dst = b.to_tensor(dst, "tma.shared_to_global dst", (ir.GLOBAL,))
        self._box(src, dst, "tma.shared_to_global")
        b.emit(ir.TmaStore(b.loc, threads, src.ref, dst.ref, self._offsets(offsets, dst, "tma.shared_to_global")))

    @language_call
    def commit_group(self) -> None:
        """Close the issuing thread's outstanding ``shared_to_global`` copies into one bulk group.
        PTX: ``cp.async.bulk.commit_group;``"""
        self.b.emit(ir.TmaCommit(self.b.loc, self._issuer("commit_group")))

    @language_call
    def wait_group(self, n) -> None:
        """Wait until at most ``n`` of the issuing thread's bulk groups are still pending (their shared sources
        read and global writes done). PTX: ``cp.async.bulk.wait_group n;``"""
        n = self.b.to_int(n, "tma.wait_group n")
        if not 0 <= n <= 7:
            raise self.b.error(f"tma.wait_group n must be in [0, 7], got {n}")
        self.b.emit(ir.TmaWait(self.b.loc, self._issuer("wait_group"), n))


class Wgmma(LanguageObject):
    """``self.wgmma``: warpgroup matrix multiply-accumulate on the tensor cores (PTX ``wgmma.*``)."""

    def _warpgroups(self, name: str) -> tuple[int, int]:
        b = self.b
        begin, count, single = b.group
        if single or begin % WARPGROUP or count % WARPGROUP or count == 0:
            where = "a single thread" if single else f"threads [{begin}, {begin + count})"
            raise b.error(f"wgmma.{name} must be executed by whole warpgroups: a thread group whose begin and size "
                          f"are multiples of 128, not {where}")
        return (begin, count)

    @language_call
    def fence(self) -> None:
        """Order earlier register accesses (accumulators, A fragments) before the next ``mma``. Executed by every
        thread of the warpgroup(s). PTX: ``wgmma.fence.sync.aligned;``"""
        self.b.emit(ir.WgmmaFence(self.b.loc, self._warpgroups("fence")))

    @language_call
    def mma(self, a, b, d) -> None:
        """Start ``d += a @ b`` on the tensor cores: ``a`` [M, K] in shared memory or registers, ``b`` [K, N] in
        shared memory (``sb[stage].transpose()`` for a B stored [N, K]), ``d`` a [M, N] float32 register tensor.
        Asynchronous: ``commit_group`` then ``wait_group`` before reading ``d`` or reusing ``a``/``b``. Executed by
        whole warpgroups, each computing its 64-row slices of M. PTX:
        ``wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16}`` with shared-memory descriptors."""
        builder = self.b
        threads = self._warpgroups("mma")
        a = builder.to_tensor(a, "wgmma.mma a", (ir.SHARED, ir.REGISTER))
        b_ = builder.to_tensor(b, "wgmma.mma b", (ir.SHARED,))
        d = builder.to_tensor(d, "wgmma.mma d", (ir.REGISTER,))
        for t, name in ((a, "a"), (b_, "b"), (d, "d")):
            if len(t.shape) != 2:
                raise builder.error(f"wgmma.mma {name} ({t.name}) must be 2-D, got shape {list(t.shape)}")
        (m, k), (k2, n), (m2, n2) = a.shape, b_.shape, d.shape
        if k != k2 or m != m2 or n != n2:
            raise builder.error(f"wgmma.mma shapes do not match: a {a.name}{list(a.shape)} @ b {b_.name}"
                                f"{list(b_.shape)} into d {d.name}{list(d.shape)}")
        if a.dtype != b_.dtype or a.dtype.name not in ("float16", "bfloat16"):
            raise builder.error(f"wgmma.mma takes float16 or bfloat16 a and b of the same type, got "
                                f"{a.dtype.name} and {b_.dtype.name}")
        if d.dtype.name not in ("float32", "float16") or (d.dtype.name == "float16" and a.dtype.name != "float16"):
            raise builder.error(f"wgmma.mma accumulates into float32 (or float16 for float16 inputs), got "
                                f"{d.dtype.name}")
        k_step = 32 // a.dtype.nbytes
        if m % (64 * (threads[1] // WARPGROUP)) or n % 8 or n > 256 or k % k_step:
            raise builder.error(f"wgmma.mma needs M a multiple of 64 per warpgroup, N a multiple of 8 up to 256 "
                                f"and K a multiple of {k_step}; got M={m} over {threads[1] // WARPGROUP} "
                                f"warpgroup(s), N={n}, K={k}")
        if a.kind == ir.REGISTER and a.ref.transposed:
            raise builder.error("wgmma.mma a from registers cannot be transposed")
        builder.emit(ir.WgmmaMma(builder.loc, threads, a.ref, b_.ref, d.ref))

    @language_call
    def commit_group(self) -> None:
        """Close the warpgroup's outstanding ``mma`` operations into one group. PTX:
        ``wgmma.commit_group.sync.aligned;``"""
        self.b.emit(ir.WgmmaCommit(self.b.loc, self._warpgroups("commit_group")))

    @language_call
    def wait_group(self, n) -> None:
        """Wait until at most ``n`` of the warpgroup's mma groups are pending; their results are then in ``d``
        and their shared operands free. PTX: ``wgmma.wait_group.sync.aligned n;``"""
        n = self.b.to_int(n, "wgmma.wait_group n")
        if not 0 <= n <= 7:
            raise self.b.error(f"wgmma.wait_group n must be in [0, 7], got {n}")
        self.b.emit(ir.WgmmaWait(self.b.loc, self._warpgroups("wait_group"), n))


class _Group(LanguageObject):
    """The context of ``with self.thread_group(...)`` / ``with self.single_thread()``."""

    def __init__(self, builder, begin: int, count: int, single: bool, max_registers=None):
        super().__init__(builder)
        self.begin, self.count, self.single, self.max_registers = begin, count, single, max_registers

    def build_block(self, build_body) -> None:
        b = self.b
        loc = b.loc
        # A group's names are its own: values computed by some threads do not exist on the others.
        b.groups.append((self.begin, self.count, self.single))
        b.scopes.append({})
        try:
            body = b.nested(build_body)
        finally:
            b.scopes.pop()
            b.groups.pop()
        if self.single:
            b.emit(ir.SingleThread(loc, self.begin, self.count, body))
        else:
            b.emit(ir.ThreadGroup(loc, self.begin, self.count, body, self.max_registers))


class Language(LanguageObject):
    """What ``self`` offers inside a Script's kernel body and helper methods."""

    def __init__(self, builder):
        super().__init__(builder)
        self.attrs = Attrs(builder)
        self.mbarrier = Mbarrier(builder)
        self.tma = Tma(builder)
        self.wgmma = Wgmma(builder)
        self.blockIdx = Dim3(builder, "blockIdx")
        self.gridDim = Dim3(builder, "gridDim")

    _PUBLIC = ("attrs", "mbarrier", "tma", "wgmma", "blockIdx", "gridDim", "global_view", "shared_tensor",
               "register_tensor", "thread_group", "single_thread", "sync", "range", "cast", "load_global",
               "store_global", "store_shared", "load_shared", "fence_proxy_async")

    def lookup(self, name: str):
        """The language member ``self.<name>``, or None when the language has no such name."""
        if name in ("threadIdx", "thread_idx", "lane_id", "warp_id"):
            raise self.b.error(f"self.{name} is not part of the language: control flow and values must not depend "
                               f"on the thread index; give work to threads with thread_group(...) and "
                               f"single_thread()")
        return getattr(self, name) if name in self._PUBLIC else None

    # ---------------------------------------------------------------------------------------------- tensors

    @language_call
    def global_view(self, ptr, dtype, shape, strides=None) -> TensorValue:
        """View global memory at pointer parameter ``ptr`` as a tensor of ``dtype`` and ``shape`` (runtime
        sizes allowed), row-major unless ``strides`` (in elements) are given. Emits no instruction; TMA uses it
        through a tensor map built on the host at launch."""
        b = self.b
        if not isinstance(ptr, ir.Var) or ptr not in b.pointer_params:
            raise b.error(f"global_view needs a pointer parameter (annotated ~dtype), got {_describe(ptr)}")
        pointee = b.pointer_params[ptr]
        if not isinstance(dtype, DType):
            raise b.error(f"global_view dtype must be a dtype such as float16, got {_describe(dtype)}")
        if dtype != pointee:
            raise b.error(f"global_view of {ptr.name} ({pointee!r} pointer) with dtype {dtype.name}")
        shape = list(shape) if isinstance(shape, (list, tuple)) else [shape]
        if not 1 <= len(shape) <= 5:
            raise b.error(f"global_view shape needs 1 to 5 dimensions, got {len(shape)}")
        sizes = tuple(b.to_expr(s, int32, "global_view shape") for s in shape)
        if strides is None:
            strides, running = [], 1
            for size in reversed(shape):  # row-major; folds to constants where the sizes are
                strides.append(running)
                running = running * size if not isinstance(size, ir.Expr) else b.scalar_binary("*", running, size)
            strides = strides[::-1]
        strides = list(strides) if isinstance(strides, (list, tuple)) else [strides]
        if len(strides) != len(sizes):
            raise b.error(f"global_view strides has {len(strides)} entries for {len(sizes)} dimensions")
        strides_exprs = tuple(b.to_expr(s, int32, "global_view strides") for s in strides)
        decl = ir.TensorDecl(b.target_name(ptr.name), ir.GLOBAL, dtype, sizes, b.loc)
        b.emit(ir.GlobalView(b.loc, decl, ptr, strides_exprs))
        return TensorValue(ir.TensorRef(decl))

    @language_call
    def shared_tensor(self, dtype, shape, swizzle=None) -> TensorValue:
        """Reserve a shared-memory tensor of compile-time ``shape`` for the whole block (index its leading
        dimension to pick a pipeline stage: ``sa[stage]``). Emits no instruction; the code generator lays each
        tile out as TMA writes it, with the widest swizzle the tile's inner extent allows, or ``swizzle`` (128, 64,
        32 or 0 bytes) when given, and aligns it to the swizzle pattern (up to 1024 bytes)."""
        b = self.b
        if b.depth:
            raise b.error("shared_tensor cannot be allocated inside a runtime loop or branch")
        dtype, shape = _static_tensor_type(b, dtype, shape, "shared_tensor")
        if swizzle is not None and b.to_int(swizzle, "shared_tensor swizzle") not in (0, 32, 64, 128):
            raise b.error(f"shared_tensor swizzle must be 0, 32, 64 or 128 bytes, got {swizzle}")
        decl = ir.TensorDecl(b.target_name("shared"), ir.SHARED, dtype, shape, b.loc)
        b.emit(ir.AllocShared(b.loc, decl, swizzle))
        return TensorValue(ir.TensorRef(decl))

    @language_call
    def register_tensor(self, dtype, shape, init=None) -> TensorValue:
        """A tensor held in the registers of the executing threads, filled with ``init`` (None: undefined). Its
        distribution over threads is chosen from its uses (WGMMA accumulator fragments, or a copy per thread for
        small arrays such as phases). No instruction beyond register moves."""
        b = self.b
        dtype, shape = _static_tensor_type(b, dtype, shape, "register_tensor")
        init_expr = None if init is None else b.to_expr(init, dtype, "register_tensor init")
        decl = ir.TensorDecl(b.target_name("regs"), ir.REGISTER, dtype, shape, b.loc)
        b.emit(ir.AllocRegister(b.loc, decl, init_expr))
        return TensorValue(ir.TensorRef(decl))

    # ------------------------------------------------------------------------------------------------- roles

    @language_call
    def thread_group(self, thread_begin, num_threads, max_registers=None) -> _Group:
        """``with self.thread_group(thread_begin=, num_threads=):`` runs its body on threads
        ``[thread_begin, thread_begin + num_threads)`` of the enclosing group only. Bounds must be compile-time
        multiples of 32 (whole warps). ``max_registers`` sets the group's per-thread register budget
        (``setmaxnreg``; the group must then be whole warpgroups)."""
        b = self.b
        begin = b.to_int(thread_begin, "thread_group thread_begin")
        count = b.to_int(num_threads, "thread_group num_threads")
        parent_begin, parent_count, single = b.group
        if single:
            raise b.error("thread_group cannot be nested inside single_thread")
        if begin % 32 or count % 32 or count <= 0:
            raise b.error(f"thread_group needs whole warps: thread_begin and num_threads multiples of 32, got "
                          f"thread_begin={begin}, num_threads={count}")
        if begin < parent_begin or begin + count > parent_begin + parent_count:
            raise b.error(f"thread_group [{begin}, {begin + count}) is outside the enclosing threads "
                          f"[{parent_begin}, {parent_begin + parent_count})")
        registers = None
        if max_registers is not None:
            registers = b.to_int(max_registers, "thread_group max_registers")
            if registers % 8 or not 24 <= registers <= 256:
                raise b.error(f"max_registers must be a multiple of 8 in [24, 256], got {registers}")
            if begin % WARPGROUP or count % WARPGROUP:
                raise b.error("max_registers (setmaxnreg) needs a thread group of whole warpgroups (128 threads)")
        return _Group(b, begin, count, False, registers)

    @language_call
    def single_thread(self) -> _Group:
        """``with self.single_thread():`` runs its body on one thread, the first of the enclosing group (elected
        with ``elect.sync`` in a warp). Instructions inside count once (one arrival)."""
        begin, count, _ = self.b.group
        return _Group(self.b, begin, count, True)

    @language_call
    def sync(self) -> None:
        """Barrier over the threads of the innermost thread group (the whole block outside any group): all of
        them arrive before any continues, and their shared-memory writes become visible to each other.
        PTX: ``bar.sync 0;`` for the block, ``bar.sync id, count;`` (named barrier) for a group."""
        b = self.b
        begin, count, single = b.group
        if single:
            raise b.error("self.sync() inside single_thread would wait for threads that never arrive")
        b.emit(ir.Sync(b.loc, begin, count))

    @language_call
    def range(self, start, stop=None, step=1, unroll=1) -> RuntimeRange:
        """A runtime loop ``for i in self.range(start, stop, step, unroll=k)``; ``step`` and ``unroll`` are
        compile-time. With ``unroll`` equal to a pipeline's stage count, stage indices become constants in each
        unrolled copy."""
        b = self.b
        if stop is None:
            start, stop = 0, start
        step = b.to_int(step, "self.range step")
        unroll = b.to_int(unroll, "self.range unroll")
        if step <= 0:
            raise b.error(f"self.range step must be positive, got {step}")
        if unroll < 1:
            raise b.error(f"self.range unroll must be >= 1, got {unroll}")
        return RuntimeRange(b.to_expr(start, int32, "self.range start"), b.to_expr(stop, int32, "self.range stop"),
                            step, unroll)

    # ------------------------------------------------------------------------------------ register operations

    @language_call
    def cast(self, tensor, dtype) -> TensorValue:
        """Convert register tensor ``tensor`` elementwise to ``dtype`` (round to nearest even). Executed by the
        threads holding it; ``cvt.rn`` instructions."""
        b = self.b
        tensor = b.to_tensor(tensor, "cast tensor", (ir.REGISTER,))
        if not isinstance(dtype, DType):
            raise b.error(f"cast dtype must be a dtype, got {_describe(dtype)}")
        return b.compute_tensor("cast", (tensor.ref,), tensor.shape, dtype, name=f"{tensor.name}_{dtype.name}")

    @language_call
    def load_global(self, view, offsets, shape) -> TensorValue:
        """Load the tile of ``shape`` at ``offsets`` from global view ``view`` into registers of the executing
        threads; elements outside the view read as zero. ``ld.global`` (vectorised where aligned)."""
        b = self.b
        view = b.to_tensor(view, "load_global view", (ir.GLOBAL,))
        dtype, shape = _static_tensor_type(b, view.dtype, shape, "load_global")
        offs = Tma._offsets(self, offsets, view, "load_global")
        if len(shape) != len(view.shape):
            raise b.error(f"load_global shape {list(shape)} must have the rank of {view.name} ({len(view.shape)})")
        return b.compute_tensor("load_global", (view.ref,) + offs, shape, dtype, name=f"{view.name}_tile")

    @language_call
    def store_global(self, view, tensor, offsets) -> None:
        """Store register tensor ``tensor`` into global view ``view`` at ``offsets``; elements that fall outside the
        view are not written (ragged edges). Executed by the threads holding the tensor; ``st.global``."""
        b = self.b
        view = b.to_tensor(view, "store_global view", (ir.GLOBAL,))
        tensor = b.to_tensor(tensor, "store_global tensor", (ir.REGISTER,))
        if tensor.dtype != view.dtype:
            raise b.error(f"store_global: {tensor.name} is {tensor.dtype.name} but {view.name} holds "
                          f"{view.dtype.name}; cast it first")
        if len(tensor.shape) != len(view.shape):
            raise b.error(f"store_global: {tensor.name} has rank {len(tensor.shape)}, {view.name} has rank "
                          f"{len(view.shape)}")
        offs = Tma._offsets(self, offsets, view, "store_global")
        b.emit(ir.StoreGlobal(b.loc, b.threads(), view.ref, tensor.ref, offs))

    @language_call
    def store_shared(self, dst, src) -> None:
        """Write register tensor ``src`` into shared tensor ``dst`` with ordinary stores (``st.shared``). Before a
        TMA store or WGMMA reads ``dst``, call ``fence_proxy_async()`` and synchronise the writers."""
        b = self.b
        dst = b.to_tensor(dst, "store_shared dst", (ir.SHARED,))
        src = b.to_tensor(src, "store_shared src", (ir.REGISTER,))
        if dst.shape != src.shape or dst.dtype != src.dtype:
            raise b.error(f"store_shared: {src.name} {src.dtype.name}{list(src.shape)} does not match "
                          f"{dst.name} {dst.dtype.name}{list(dst.shape)}")
        b.emit(ir.StoreShared(b.loc, b.threads(), dst.ref, src.ref))

    @language_call
    def load_shared(self, src) -> TensorValue:
        """Read shared tensor ``src`` into registers of the executing threads (``ld.shared``)."""
        b = self.b
        src = b.to_tensor(src, "load_shared src", (ir.SHARED,))
        if src.ref.transposed:
            raise b.error("load_shared of a transposed view is not supported")
        return b.compute_tensor("load_shared", (src.ref,), src.shape, src.dtype, name=f"{src.name}_regs")

    @language_call
    def fence_proxy_async(self) -> None:
        """Make the executing threads' ordinary shared-memory writes visible to later asynchronous reads (TMA
        stores, WGMMA). PTX: ``fence.proxy.async.shared::cta;``"""
        self.b.emit(ir.FenceProxyAsync(self.b.loc, self.b.threads()))


def _static_tensor_type(b, dtype, shape, what: str) -> tuple[DType, tuple[int, ...]]:
    if not isinstance(dtype, DType):
        raise b.error(f"{what} dtype must be a dtype such as float16, got {_describe(dtype)}")
    shape = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    dims = tuple(b.to_int(s, f"{what} shape") for s in shape)
    if not dims or any(d <= 0 for d in dims):
        raise b.error(f"{what} shape must have positive extents, got {list(dims)}")
    return dtype, dims


def _leaves(expr):
    if isinstance(expr, (ir.Binary,)):
        yield from _leaves(expr.a)
        yield from _leaves(expr.b)
    elif isinstance(expr, (ir.Unary, ir.Convert)):
        yield from _leaves(expr.a)
    elif isinstance(expr, ir.Select):
        for part in (expr.cond, expr.a, expr.b):
            yield from _leaves(part)
    else:
        yield expr


def _describe(value) -> str:
    from warpspec.frontend.builder import describe

    return describe(value)

