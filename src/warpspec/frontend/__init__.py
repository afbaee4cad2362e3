"""Python kernel source → IR."""
