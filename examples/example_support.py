"""What the examples' ``__main__`` blocks share: running a kernel on whichever back end is selected, and checking
a C = A·Bᵀ matmul against numpy."""

import numpy as np

import warpspec
from warpspec.dtypes import numpy_to_torch, torch_to_numpy


def run_on_backend(kernel, *args):
    """Call ``kernel(*args)`` on the selected back end and return its array arguments as numpy arrays afterwards.
    The emulator takes numpy arrays as they are; the GPU back end takes device arrays, so they go through torch
    (bit for bit: bfloat16 and fp8 arrays of ml_dtypes types become torch tensors of the same dtype)."""
    if warpspec.get_backend() == "emulator":
        kernel(*args)
        return [arg for arg in args if isinstance(arg, np.ndarray)]
    import torch

    device_args = [numpy_to_torch(arg).cuda() if isinstance(arg, np.ndarray) else arg for arg in args]
    kernel(*device_args)
    torch.cuda.synchronize()
    return [torch_to_numpy(arg.cpu()) for arg in device_args if isinstance(arg, torch.Tensor)]


def check_matmul(kernel, m: int = 300, n: int = 200, k: int = 200) -> None:
    """Run fp16 C = A·Bᵀ with ``kernel`` at a shape that is no multiple of any tile (TMA zero-fill, clipped
    stores), compare with numpy and print the verdict."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    c = np.full((m, n), np.nan, dtype=np.float16)  # NaN shows any tile left unwritten
    _, _, c = run_on_backend(kernel, m, n, k, a, b, c)
    reference = a.astype(np.float32) @ b.astype(np.float32).T
    error = np.abs(c.astype(np.float32) - reference).max()
    print(f"{warpspec.get_backend()}: max abs error {error:.4f} vs numpy")
    assert error < 0.1, error
    print("OK")
