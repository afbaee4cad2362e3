"""Timelines of a kernel's roles: what each role of a sampled block did when, measured on the GPU by an
instrumented build or modeled on the CPU, and what is drawn and summarised from them."""
