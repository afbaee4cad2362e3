"""Every ``warpspec`` command's ``--help``: printed on stdout with the command's usage and options, exit code 0."""

import re

import pytest

from warpspec.cli import main

#: Each command line before ``--help``, with an option or argument its help must show.
COMMANDS = {
    (): "--version",
    ("check",): "--max-memory SIZE",
    ("build",): "--all-schedules",
    ("cache",): "ACTION",
    ("cache", "info"): "usage: warpspec cache info [-h]",
    ("cache", "clear"): "--cubins",
    ("tune",): "--shapes MxNxK,...",
    ("timeline",): "--out DIR",
}
NAMES = ["check", "build", "cache", "tune", "timeline"]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: " ".join(command) or "warpspec")
def test_help_prints_the_usage_and_exits_0(command, capsys):
    assert main([*command, "--help"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith(f"usage: {' '.join(('warpspec',) + command)} ")
    assert COMMANDS[command] in out


def test_the_commands_here_are_the_parsers(capsys):
    assert main(["no-such-command"]) == 2
    _, err = capsys.readouterr()
    assert f"(choose from {', '.join(map(repr, NAMES))})" in err
    assert {(name,) for name in NAMES} <= set(COMMANDS)


def test_top_level_help_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out, _ = capsys.readouterr()
    listed = re.findall(r"^    (\w+)(?: |$)", out, re.MULTILINE)
    assert listed == NAMES
