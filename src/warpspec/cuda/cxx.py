"""C++ spellings every emitter of the CUDA back end shares."""

from __future__ import annotations

#: The C++ type holding each dtype (16-bit floats and float8 as their bit patterns).
C_TYPES = {"int32": "int", "uint32": "unsigned", "int64": "long long", "float32": "float", "boolean": "bool",
           "float16": "unsigned short", "bfloat16": "unsigned short", "int8": "signed char",
           "float8_e4m3": "unsigned char", "float8_e5m2": "unsigned char"}


def thread_prelude(begin: int) -> str:
    """C++ declaring the per-thread names register layouts' coordinates use (``t_``, ``g_``, ``w_``, ``lane_``),
    for a group starting at thread ``begin``."""
    return (f"const int t_ = static_cast<int>(threadIdx.x) - {begin}; const int g_ = t_ >> 7, w_ = (t_ >> 5) & 3, "
            f"lane_ = t_ & 31; (void)g_; (void)w_; (void)lane_;")
