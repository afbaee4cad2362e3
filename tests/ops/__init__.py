"""warpspec.ops: the matmul and attention operators, on numpy arrays and torch tensors."""
