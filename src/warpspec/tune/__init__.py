"""Schedules of autotuned Scripts: enumerating, pruning, building, timing and remembering them."""
