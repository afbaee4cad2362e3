"""warpspec.cuda: code generation, compiling, the cubin cache, SASS, launches and debug builds."""
