"""Kernels the tests run: correct ones that exercise one feature, and ones with one bug planted each."""
