"""warpspec.passes: the IR passes (unrolling, constant propagation, instrumentation)."""
