"""warpspec.tune: pruning, timing and the tuning cache."""
