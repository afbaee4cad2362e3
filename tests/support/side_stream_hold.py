"""Does a Script call made under ``torch.cuda.stream(side)`` run on ``side``? Run as a program
(``python -m tests.support.side_stream_hold SCHEDULE_JSON``) in a process of its own, which prints one JSON line:
``held`` (the kernel had not run while ``side`` was busy with a spin kernel queued before it) and ``error`` (its
result's relative error once ``side`` finished).

The order comes from the stream, not from how fast the kernel runs: ``torch.cuda._sleep`` spins one block for
``SPIN_CYCLES`` clock cycles (about five seconds), the call is queued behind it on ``side``, and the result is read
on the default stream at once. Had the call gone to any other stream it would have run beside the spin and the read
would see it; on ``side`` it cannot start before the spin ends. The one assumption is that the read takes less than
the spin's seconds. Nothing waits on a semaphore, so nothing can hang: at worst ``side`` finishes when the spin
does.

Why a process of its own: the driver spreads streams over ``CUDA_DEVICE_MAX_CONNECTIONS`` hardware queues (8 by
default), and work queued behind the spin in one queue holds back later work of any stream that shares the queue.
In a test worker that has made PyTorch's pool of 64 streams, the default stream's read could share ``side``'s queue
and wait for the spin. Here the variable is 32 before CUDA starts and the process makes one stream besides the
default one (not from PyTorch's pool), so each has a queue of its own.

And every kernel the read launches runs once before the spin starts: CUDA loads a module's kernels lazily, at their
first launch, and a load waits for the kernels running on the device, so a first read would wait out the spin and
find the output written.
"""

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "32"  # before anything starts CUDA
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402
from cuda.bindings import driver as cu  # noqa: E402

import warpspec  # noqa: E402
from warpspec.cuda.driver import check  # noqa: E402

#: About five seconds at the H200's 2 GHz: far longer than reading the result takes, however loaded the host.
SPIN_CYCLES = 10_000_000_000


def main() -> None:
    from matmul_v3 import MatmulWGMMAV3

    schedule = json.loads(sys.argv[1])
    generator = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(256, 128, device="cuda", dtype=torch.float16, generator=generator)
    b = torch.randn(256, 128, device="cuda", dtype=torch.float16, generator=generator)
    c = torch.empty(256, 256, device="cuda", dtype=torch.float16)

    def read_output() -> bool:
        """Whether c is still all NaN, read on the default stream."""
        return bool(torch.isnan(c).all().item())

    # A non-blocking stream made by the driver (PyTorch's pool would make 64 at once).
    side = torch.cuda.ExternalStream(int(check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value),
                                               "cuStreamCreate")))
    with warpspec.use_backend("cuda"):
        kernel = MatmulWGMMAV3(**schedule)
        kernel(256, 256, 128, a, b, c)  # plan made outside the side stream
        c.fill_(float("nan"))
        torch.cuda.synchronize()  # c's NaNs are in memory before side starts its spin
        read_output()  # the read's kernels loaded before the spin (see the module's docstring)
        side.query()
        with torch.cuda.stream(side):
            torch.cuda._sleep(SPIN_CYCLES)
            kernel(256, 256, 128, a, b, c)
        held = (not side.query()) and read_output()
        side.synchronize()
    reference = a.double() @ b.double().T
    error = ((c.double() - reference).norm() / reference.norm()).item()
    print(json.dumps({"held": held, "error": error}))


if __name__ == "__main__":
    main()
