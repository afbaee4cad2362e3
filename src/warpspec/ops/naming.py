"""Kernel names of the library's Script classes that take their element types as constructor arguments.

One class serves every element type, but the built kernel (the CUDA function, what profilers and error messages
show) still says which types it runs: ``GemmBF16F32``, ``AttentionF16``.
"""

from __future__ import annotations

from warpspec.dtypes import DType

#: The short names of element types in kernel names.
SHORT_NAMES = {"float16": "F16", "bfloat16": "BF16", "float32": "F32", "float8_e4m3": "E4M3"}


def typed_kernel_name(script, owner: type, stem: str, dtypes: tuple[DType, ...]) -> str:
    """``stem`` followed by the short names of ``dtypes`` when ``script`` is an instance of ``owner`` itself; the
    class name for a subclass (a variant defined elsewhere, such as a planted bug in the tests), which names its
    own kernel."""
    if type(script) is not owner:
        return type(script).__name__
    return stem + "".join(SHORT_NAMES[dtype.name] for dtype in dtypes)
