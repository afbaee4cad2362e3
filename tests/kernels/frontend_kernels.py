"""Small kernels for the front-end tests (the front end reads kernel source from files)."""

import warpspec
from warpspec import float16, float32, int32
from tests.support.markers import markers_of


class ReturnsFromBody(warpspec.Script):
    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        return n  # <<< body-return


class ReturnInRuntimeLoop(warpspec.Script):
    def first_positive(self, n):
        for i in self.range(n):
            if i > 0:
                return i  # <<< loop-return
        return 0

    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        self.first_positive(n)


class PowerOfTensor(warpspec.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        t = self.register_tensor(float32, [4], init=2.0)
        t ** 2  # <<< tensor-power


class TensorMinMax(warpspec.Script):
    """out = max(min(x, 1), -1) elementwise, through load_global/store_global on the emulator."""

    def __call__(self, n: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[n])
        out = self.global_view(out_ptr, dtype=float32, shape=[n])
        t = self.load_global(x, offsets=[0], shape=[8])
        ones = self.register_tensor(float32, [8], init=1.0)
        clipped = max(min(t, ones), -ones)
        self.store_global(out, clipped, offsets=[0])


class Float16Scalar(warpspec.Script):
    def __call__(self, scale: float16, x_ptr: ~float32):  # <<< f16-param
        self.attrs.blocks = [1]
        self.attrs.warps = 4


marker_line = markers_of(__file__)


class AssignsAScalarParameter(warpspec.Script):
    """A helper assigns its runtime scalar parameter; ``out`` gets [the caller's variable after the call, what the
    helper returned]. ``mode``: ``"top"`` (``k = k + 1``: [10n, 10n + 1]), ``"loop"`` (``k = k + 1`` in a runtime loop
    of n iterations: [10n, 11n]), ``"loop-variable"`` (the caller's loop variable i passed in and doubled, the loop
    counting its iterations: [n, 2(n - 1)] for n > 0), ``"loop-body"`` (the loop variable doubled in the loop's own
    body: the same)."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def counted(self, k, n):
        if self.mode == "top":
            k = k + 1
        else:
            for _ in self.range(n):
                k = k + 1
        return k

    def doubled(self, i):
        i = i * 2
        return i

    def __call__(self, n: int32, out_ptr: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        out = self.global_view(out_ptr, dtype=int32, shape=[2])
        result = self.register_tensor(dtype=int32, shape=[2], init=0)
        if self.mode in ("loop-variable", "loop-body"):
            count: int32 = 0
            last: int32 = 0
            for i in self.range(n):
                if self.mode == "loop-body":
                    i = i * 2
                    last = i
                else:
                    last = self.doubled(i)
                count = count + 1
            result[0] = count
            result[1] = last
        else:
            k: int32 = n * 10
            r = self.counted(k, n)
            result[0] = k
            result[1] = r
        self.store_global(out, result, offsets=[0])


class RebindsToOtherTensorsInALoop(warpspec.Script):
    """Names bound before a runtime loop of n iterations, rebound inside it to tensors that are not the statement
    just built. ``mode``: ``"fibonacci"`` (``a, b = b, a + b``: a = F(n), b = F(n + 1)), ``"pair"`` (``x, y = x +
    1.0, y + 2.0``: n, 2n), ``"branch"`` (``if i == 2: a = b`` then b grows: a = 3 if n > 2, else 0; b = n + 1),
    ``"list"`` (an item of a list rebound: refused at the line)."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def __call__(self, n: int32, out_ptr: ~float32, other_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        out = self.global_view(out_ptr, dtype=float32, shape=[8])
        other = self.global_view(other_ptr, dtype=float32, shape=[8])
        a = self.register_tensor(dtype=float32, shape=[8], init=0.0)
        b = self.register_tensor(dtype=float32, shape=[8], init=1.0 if self.mode != "pair" else 0.0)
        parts = [a + 0.0, b + 0.0] if self.mode == "list" else []
        for i in self.range(n):
            if self.mode == "fibonacci":
                a, b = b, a + b
            elif self.mode == "pair":
                a, b = a + 1.0, b + 2.0
            elif self.mode == "branch":
                if i == 2:
                    a = b
                b = b + 1.0
            else:
                parts[0] = parts[0] + 1.0  # <<< list-item
        self.store_global(out, a, offsets=[0])
        self.store_global(other, b, offsets=[0])


class UpdatesAParameterInALoop(warpspec.Script):
    """A helper updates its parameter inside a runtime loop and returns it; ``other`` gets what it returns, ``out``
    the caller's tensor. ``mode``: ``"add"`` (``t = t + 1.0`` n times: x + n), ``"read-first"`` (the loop reads t
    into another name before the update: x + n), ``"nested"`` (``t = t * 2.0`` in a compile-time loop of 2 inside
    the runtime loop: x · 4ⁿ), ``"moved"`` (``a = self.grown(a, n)``: the helper computes into a's registers, and
    ``out`` reads the input again), ``"alias-read"`` (``u = t`` before the loop, ``t = t + u`` in it: x · (n + 1))."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def grown(self, t, n):
        u = t if self.mode == "alias-read" else None
        for _ in self.range(n):
            if self.mode == "alias-read":
                t = t + u
            elif self.mode == "read-first":
                s = t + 0.5
                t = s + 0.5
            elif self.mode == "nested":
                for _ in range(2):
                    t = t * 2.0
            else:
                t = t + 1.0
        return t

    def __call__(self, n: int32, x_ptr: ~float32, out_ptr: ~float32, other_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[8])
        out = self.global_view(out_ptr, dtype=float32, shape=[8])
        other = self.global_view(other_ptr, dtype=float32, shape=[8])
        a = self.load_global(x, offsets=[0], shape=[8])
        if self.mode == "moved":
            a = self.grown(a, n)
            self.store_global(other, a, offsets=[0])
            self.store_global(out, self.load_global(x, offsets=[0], shape=[8]), offsets=[0])
        else:
            self.store_global(other, self.grown(a, n), offsets=[0])
            self.store_global(out, a, offsets=[0])


class RebindsACopyOfAName(warpspec.Script):
    """``b = a`` then a new value for b: out holds a, unchanged (``alias_in_loop``: b updated inside a runtime
    loop instead, which would change a too, and is refused). ``element_in_loop``: inside a runtime loop,
    ``m = parts[0]`` then a new value for m: out holds parts[0], unchanged, and other the new value (written into
    parts[0]'s registers, it would change out too). ``parameter``: a helper takes a and rebinds its parameter to
    twice it (``"in-branch"``: inside a runtime branch), returning that: out holds a, unchanged; ``"moved"``: the
    call rebinds a to the result (``a = self.doubled(a, n)``), so the helper computes into a's registers;
    ``"moved-twice"``: ``a = self.doubled_plus(a, a, n)`` passes a twice, so neither parameter may compute into it
    (other holds three times a)."""

    def __init__(self, alias_in_loop=False, element_in_loop=False, parameter=None):
        super().__init__()
        self.alias_in_loop = alias_in_loop
        self.element_in_loop = element_in_loop
        self.parameter = parameter

    def doubled_plus(self, t, u, n):
        if n > 0:
            t = t * 2.0
        return t + u

    def doubled(self, t, n):
        if self.parameter in ("in-branch", "moved", "moved-twice"):
            if n > 0:
                t = t * 2.0
        else:
            t = t * 2.0
        return t

    def __call__(self, n: int32, x_ptr: ~float32, out_ptr: ~float32, other_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[n])
        out = self.global_view(out_ptr, dtype=float32, shape=[n])
        other = self.global_view(other_ptr, dtype=float32, shape=[n])
        a = self.load_global(x, offsets=[0], shape=[8])
        if self.parameter == "moved-twice":
            a = self.doubled_plus(a, a, n)
            self.store_global(other, a, offsets=[0])
            self.store_global(out, self.load_global(x, offsets=[0], shape=[8]), offsets=[0])
        elif self.parameter == "moved":
            a = self.doubled(a, n)
            self.store_global(other, a, offsets=[0])
            self.store_global(out, self.load_global(x, offsets=[0], shape=[8]), offsets=[0])
        elif self.parameter is not None:
            self.store_global(other, self.doubled(a, n), offsets=[0])
            self.store_global(out, a, offsets=[0])
        elif self.element_in_loop:
            for _ in self.range(1):
                parts = [a * float(k + 1) for k in range(2)]
                m = parts[0]
                m = max(m, parts[1])
                self.store_global(out, parts[0], offsets=[0])
                self.store_global(other, m, offsets=[0])
        else:
            b = a
            if self.alias_in_loop:
                for _ in self.range(n):
                    b = b + 1.0  # <<< alias-in-loop
            else:
                b = b * 2.0
            self.store_global(out, a, offsets=[0])
            self.store_global(other, b, offsets=[0])
