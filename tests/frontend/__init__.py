"""warpspec.frontend: the rules of the kernel language and the errors that name the user's line."""
