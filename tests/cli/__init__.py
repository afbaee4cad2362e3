"""warpspec.cli: the warpspec command's subcommands through warpspec.cli.main."""
