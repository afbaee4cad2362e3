"""CUDA back end plumbing: compiling CUDA C++ to sm_90a cubins (``compiler``), reading their machine code and
resource usage (``sass``) and loading, encoding tensor maps for and launching them (``driver``).

The submodules are imported on demand so that ``import warpspec`` never needs a GPU, a driver or NVRTC.
"""
