"""warpspec.layout: register fragments and shared-memory placement."""
