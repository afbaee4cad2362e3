"""What the library ops (``warpspec.ops``) share around their kernels: a call's description as a cache key, the
bounded caches of what the first call of a description decided, and the eager fast path later calls of it take.

An op validates a description (kind, dtype, shape, strides and device of each array, and its other arguments)
once, at its first call, and keeps the result under that description; a later call with arrays of the same
description costs a dictionary lookup instead of the checks. Once such a call has launched on plain CUDA tensors,
its launch is bound (``runtime.pointer_launcher``), and later ones pass their arrays' addresses alone: small
kernels (a decode step, a small GEMM) are otherwise bound by host time.
"""

from __future__ import annotations

import sys

import numpy as np

from warpspec import runtime
from warpspec.ops.kernels import NUM_SMS

#: Descriptions each op keeps; past that its cache starts afresh (a process that calls more shapes than this
#: pays the checks again, and no cache grows without bound).
MAX_SIGNATURES = 256


class Signatures(dict):
    """A dictionary of what the first call of each description decided, bounded by ``MAX_SIGNATURES`` (a dict, so
    that a lookup costs what a dict's does)."""

    def remember(self, key, value):
        """Keep ``value`` under ``key`` (a None key, from an unhashable description, is not kept); returns
        ``value``."""
        if key is not None:
            if len(self) >= MAX_SIGNATURES:
                self.clear()
            self[key] = value
        return value


def describe(value):
    """What validation reads of an array or tensor: class, dtype, shape, strides and, for an array, whether it is
    writeable, for a tensor its device (None stays None): two values of one description pass the same checks, so
    a subclass such as numpy.matrix or a read-only out never takes a plain array's cached signature. Raises
    TypeError or AttributeError for what is neither (the op's checks then say what is wrong)."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        return (type(value), value.dtype, value.shape, value.strides, value.flags.writeable)
    return (type(value), value.dtype, value.shape, value.stride(), value.device)


def plain_cuda(*values) -> bool:
    """Whether every value (None passed over) is a CUDA tensor of the plain ``torch.Tensor`` class: what a bound
    launch may be made for."""
    torch = sys.modules.get("torch")
    return torch is not None and all(v is None or (type(v) is torch.Tensor and v.is_cuda) for v in values)


def has_memory(value) -> bool:
    """Whether a numpy array's or torch tensor's elements lie at an address: not for torch.compile's fake tensors
    or meta tensors, whose ``data_ptr()`` is no address (and is deprecated for fake tensors)."""
    if isinstance(value, np.ndarray):
        return True
    if value.is_meta:
        return False
    fake = sys.modules.get("torch._subclasses.fake_tensor")
    return fake is None or not fake.is_fake(value)


def address(value) -> int:
    """The address of the first element of a numpy array or a torch tensor."""
    if isinstance(value, np.ndarray):
        return value.__array_interface__["data"][0]
    return value.data_ptr()


def bound_launcher(launched: tuple):
    """What an op's ``direct`` path needs from its first launch on plain CUDA tensors (``launched``: the Script and
    the arguments it was called with): ``(bound, capturing, current_stream, empty)``, the bound launch
    (``runtime.pointer_launcher``) with torch's capture test, raw current stream and allocator, looked up once; or
    None where calls must take the Script's own path."""
    bound = runtime.pointer_launcher(*launched)
    if bound is None:
        return None
    torch = sys.modules["torch"]
    C = torch._C
    return bound, C._cuda_isCurrentStreamCapturing, C._cuda_getCurrentRawStream, torch.empty


def sm_count() -> int:
    """The number of SMs of the GPU launches go to (the persistent kernels' grid bound); on the emulator the
    kernels' default, the H200's."""
    return runtime.multiprocessor_count() if runtime.get_backend() == "cuda" else NUM_SMS
