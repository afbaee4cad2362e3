"""warpspec.emulator: what the emulator runs and the races, deadlocks and misuses it names."""
