"""warpspec.isa: one tests/isa/test_<family>.py per instruction family, the template a new instruction copies."""
