"""warpspec.timeline: the CPU timing model, GPU records, warpspec.profile() and the views of a timeline."""
