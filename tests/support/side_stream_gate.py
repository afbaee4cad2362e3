"""Does a Script call made under ``torch.cuda.stream(side)`` run on ``side``? Run as a program
(``python -m tests.support.side_stream_gate``) in a process of its own, which prints one JSON line: ``held`` (the
kernel had not run while ``side`` was held at a gate) and ``error`` (its result's relative error once the gate
opened).

Why a process of its own: a gate is a ``cuStreamWaitValue32`` queued on ``side``, and the GPU stalls the hardware
queue that holds it. The driver spreads streams over ``CUDA_DEVICE_MAX_CONNECTIONS`` queues (8 by default), so in a
test worker that has made PyTorch's pool of 64 streams, the stream that opens the gate (or the default stream that
reads the result) can share ``side``'s queue and wait behind the gate for ever. Here the variable is 32 before CUDA
starts and the process makes three streams (the default one, ``side`` and the opener's, none from PyTorch's pool),
so each has a queue of its own and the order the test asserts is forced by the gate alone.
"""

import faulthandler
import json
import os
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).parents[2]
CONNECTIONS = "32"
os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = CONNECTIONS  # before anything starts CUDA
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402
from cuda.bindings import driver as cu  # noqa: E402

import warpspec  # noqa: E402
from warpspec.cuda.driver import check, context  # noqa: E402

#: The watchdog opens the gate after this long, so a launch that wrongly waits for ``side`` ends in a failed
#: assertion instead of a hang.
WATCHDOG_S = 30.0
#: Past this, every thread's stack goes to stderr (the test shows it), naming a call that waited on ``side``.
STACKS_AFTER_S = 20.0


def new_stream() -> "torch.cuda.ExternalStream":
    """A non-blocking stream made by the driver (not taken from PyTorch's pool, which would make 64 at once)."""
    handle = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value), "cuStreamCreate")
    return torch.cuda.ExternalStream(int(handle))


def main() -> None:
    from matmul_v3 import MatmulWGMMAV3

    schedule = json.loads(sys.argv[1])
    generator = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(256, 128, device="cuda", dtype=torch.float16, generator=generator)
    b = torch.randn(256, 128, device="cuda", dtype=torch.float16, generator=generator)
    c = torch.empty(256, 256, device="cuda", dtype=torch.float16)
    word = torch.zeros(1, dtype=torch.int32, device="cuda")
    side, opener = new_stream(), new_stream()

    def open_gate() -> None:
        context(0)  # the watchdog's thread has no current context of its own
        check(cu.cuStreamWriteValue32(cu.CUstream(opener.cuda_stream), word.data_ptr(), 1,
                                      cu.CUstreamWriteValue_flags.CU_STREAM_WRITE_VALUE_DEFAULT), "cuStreamWriteValue32")

    with warpspec.use_backend("cuda"):
        kernel = MatmulWGMMAV3(**schedule)
        kernel(256, 256, 128, a, b, c)  # plan made outside the side stream
        c.fill_(float("nan"))
        torch.cuda.synchronize()  # the word's zero and c's NaNs are in memory before the gate closes
        check(cu.cuStreamWaitValue32(cu.CUstream(side.cuda_stream), word.data_ptr(), 1,
                                     cu.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue32")
        watchdog = threading.Timer(WATCHDOG_S, open_gate)
        watchdog.daemon = True
        watchdog.start()
        faulthandler.dump_traceback_later(STACKS_AFTER_S)
        with torch.cuda.stream(side):
            kernel(256, 256, 128, a, b, c)
        # Had the kernel gone to the default stream it would be done now; on ``side`` it waits at the gate, which
        # nothing opens before the watchdog, so it has not run whatever the timing.
        torch.cuda.default_stream().synchronize()
        held = (not side.query()) and bool(torch.isnan(c).all().item())
        watchdog.cancel()
        faulthandler.cancel_dump_traceback_later()
        open_gate()
        side.synchronize()
    reference = a.double() @ b.double().T
    error = ((c.double() - reference).norm() / reference.norm()).item()
    print(json.dumps({"held": held, "error": error}))


if __name__ == "__main__":
    main()
