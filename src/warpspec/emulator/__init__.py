"""The emulator back end: runs kernels on the CPU over numpy and checks the hardware's rules as they run."""
