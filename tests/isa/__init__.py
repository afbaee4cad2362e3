"""warpspec.isa: one test file per instruction family (tests/isa/test_<family>.py), the template a new instruction copies."""
