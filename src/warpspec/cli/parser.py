"""The ``warpspec`` argument parser: its assembly from the commands' subparsers, and the arguments and argument
types that several commands share."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from types import ModuleType

from warpspec import __version__


def build_parser(commands: Sequence[ModuleType]) -> argparse.ArgumentParser:
    """The argument parser with one subparser per module of ``commands``, added by the module's
    ``add_parser(subparsers)`` in the order ``warpspec --help`` lists them."""
    parser = argparse.ArgumentParser(prog="warpspec", description="Write, check and run warp-specialized Hopper "
                                                                  "kernels.")
    parser.add_argument("--version", action="version", version=f"warpspec {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands:
        command.add_parser(subparsers)
    return parser


def add_kernel_arguments(command: argparse.ArgumentParser, arguments_help: str) -> None:
    """A subcommand's kernel positionals: FILE.py:CLASS, then the NAME=VALUE arguments (``arguments_help``)."""
    command.add_argument("target", metavar="FILE.py:CLASS", help="the file defining the kernel and its Script class")
    command.add_argument("arguments", nargs="*", metavar="NAME=VALUE", help=arguments_help)


def _int_at_least(low: int, what: str):
    """An argparse ``type``: an integer of at least ``low`` (``what`` names such a number in its error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


non_negative_int = _int_at_least(0, "a non-negative integer")
positive_int = _int_at_least(1, "a positive integer")
