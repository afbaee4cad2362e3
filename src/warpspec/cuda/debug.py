"""Debug mode on the GPU: a barrier or flag wait that hangs ends the kernel within a second, with a message.

In debug mode (``warpspec.set_debug(True)``, ``with warpspec.debug():`` or ``WARPSPEC_DEBUG=1`` when warpspec is
imported) Scripts launch a debug build of their kernel, whose ``mbarrier.wait`` and ``flag.wait`` give up after a
quarter of a second: the first thread to give up writes where it was (the wait's site, the barrier or flag index,
the parity or awaited value, its block and thread) into a small record of page-locked host memory, then traps. The launch waits for the kernel and raises
``BarrierTimeoutError`` at the wait's kernel line. A trap leaves the process's CUDA context unusable, so the record
lives in host memory the host can still read, and the message says to restart. Plain builds are unchanged.
"""

from __future__ import annotations

import ctypes
import struct
import time

from warpspec.cuda.driver import CudaError, check, context, default_device, load_module, on_device
from warpspec.cuda.launch import compile_kernel, launch_planned
from warpspec.cuda.plan import first_array_device
from warpspec.errors import BarrierTimeoutError
from warpspec.ir import nodes as ir

#: Words of the record: site + 1 (0: nothing happened), block index, thread, parity and barrier index.
RECORD_WORDS = 4
_records: dict[int, tuple[int, int]] = {}  # device -> (host address, device address) of its record


def _record(device: int) -> tuple[int, int]:
    """The device's record in mapped page-locked host memory (made once), zeroed."""
    from cuda.bindings import driver as cu

    if device not in _records:
        context(device)
        flags = cu.CU_MEMHOSTALLOC_DEVICEMAP | cu.CU_MEMHOSTALLOC_PORTABLE
        host = int(check(cu.cuMemHostAlloc(8 * RECORD_WORDS, flags), "allocating the debug record"))
        device_pointer = int(check(cu.cuMemHostGetDevicePointer(host, 0), "mapping the debug record"))
        _records[device] = (host, device_pointer)
    host, device_pointer = _records[device]
    ctypes.memset(host, 0, 8 * RECORD_WORDS)
    return host, device_pointer


def run_debug(kernel: ir.Kernel, arguments: dict) -> None:
    """Launch ``kernel``'s debug build with runtime ``arguments``, wait for it, and raise ``BarrierTimeoutError``
    when one of its barrier waits gave up."""
    from cuda.bindings import driver as cu

    built = compile_kernel(kernel, debug=True)
    device = first_array_device(kernel, arguments)  # the arrays' GPU, where the launch goes
    if device is None:
        device = default_device()
    with on_device(device):
        host, device_pointer = _record(device)
        module = load_module(built.module.cubin, device)
        address, _ = check(cu.cuModuleGetGlobal(module.handle, b"warpspec_debug_record"),
                           "finding the debug record")
        check(cu.cuMemcpyHtoD(address, struct.pack("<Q", device_pointer), 8), "setting the debug record")
        started = time.perf_counter()
        launch_planned(kernel, arguments, built=built)
        (result,) = cu.cuCtxSynchronize()
    words = struct.unpack(f"<{RECORD_WORDS}Q", ctypes.string_at(host, 8 * RECORD_WORDS))
    if words[0]:
        raise _timeout(built.generated.debug_sites[words[0] - 1], words, time.perf_counter() - started)
    if result != cu.CUresult.CUDA_SUCCESS:
        raise CudaError(f"the debug build of {kernel.name} failed: {result.name}", result)


def _timeout(site, words, seconds: float) -> BarrierTimeoutError:
    block = (words[1] & 0x1FFFFF, (words[1] >> 21) & 0x1FFFFF, words[1] >> 42)
    thread, parity, index = words[2] & 0xFFFF, (words[2] >> 16) & 0xFFFF, words[2] >> 32
    begin, count = site.threads
    who = "one thread" if count == 1 else f"threads [{begin}, {begin + count})"
    waited = (f"flag.wait until {site.barrier}[{index}] == {parity} (the value's low 16 bits)" if site.kind == "flag"
              else f"mbarrier.wait on {site.barrier}[{index}] for phase parity {parity}")
    return BarrierTimeoutError(
        f"debug mode: {waited} did not pass within 0.25 s "
        f"({who} wait there; thread {thread} of block {block} gave up, the kernel was stopped after {seconds:.1f} s). "
        f"The GPU context of this process cannot be used after the stop: restart it to run kernels again",
        site.loc)
