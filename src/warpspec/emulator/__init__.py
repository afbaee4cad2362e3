"""The emulator back end: runs kernels on the CPU over numpy and checks the hardware's rules as they run;
``prove`` checks every interleaving class (``warpspec.emulator.explore``)."""


def prove(kernel, arguments: dict, budget=None):
    """``warpspec.emulator.explore.prove``: check ``kernel`` under every interleaving class."""
    from warpspec.emulator.explore import prove as explore_prove

    return explore_prove(kernel, arguments, budget)
