"""``warpspec cache``: show or clear the disk cache of compiled kernels and tuning winners."""

from __future__ import annotations

import argparse
import sys

from warpspec.cli.failures import EXIT_FAILURE, EXIT_OK

#: The cache kinds ``warpspec cache`` knows: option name -> subfolder of the cache directory.
CACHE_KINDS = {"cubins": "cubin", "tuning": "tuning"}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``warpspec cache``'s subparser and its actions, with ``cache_command`` as their handler."""
    cache = subparsers.add_parser(
        "cache", help="show or clear warpspec's disk cache (compiled kernels and tuning winners)",
        description="The cache lives in $WARPSPEC_CACHE_DIR, else $XDG_CACHE_HOME/warpspec, else "
                    "~/.cache/warpspec.")
    actions = cache.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("info", help="print the cache folder and how many entries of each kind it holds")
    clear = actions.add_parser("clear", help="delete cache entries (both kinds unless one is chosen)")
    clear.add_argument("--tuning", action="store_true", help="delete the tuning winners")
    clear.add_argument("--cubins", action="store_true", help="delete the compiled kernels")
    cache.set_defaults(handler=cache_command)


def cache_command(args) -> int:
    """``warpspec cache info`` / ``warpspec cache clear [--tuning] [--cubins]``. A folder that cannot be read, or
    an entry that cannot be removed (a read-only cache), is named in a warning on stderr and makes the exit code
    1; the other entries are still shown or removed."""
    from warpspec.cuda.compiler import cache_dir, clear_cache
    from warpspec.files import problem_text
    from warpspec.tune.cache import entry_sizes

    root = cache_dir()
    failures = 0
    refused = set()  # the folders (a kind's, or the root) that could not be cleared at all

    def warn(doing: str, path, error: OSError) -> None:
        nonlocal failures
        failures += 1
        print(f"warpspec cache {args.action}: warning: {problem_text(doing, path, error)}", file=sys.stderr)

    if args.action == "info":
        print(f"cache directory: {root}")
        for option, kind in CACHE_KINDS.items():
            folder = root / kind
            try:
                sizes = entry_sizes(kind)
            except OSError as error:
                warn("read", folder, error)
                continue
            print(f"{option}: {len(sizes)} entries, {sum(sizes) / 2**20:.1f} MiB in {folder}")
        return EXIT_FAILURE if failures else EXIT_OK
    chosen = [option for option in CACHE_KINDS if getattr(args, option)] or list(CACHE_KINDS)
    for option in chosen:
        before = failures
        folder = root / CACHE_KINDS[option]

        def not_removed(path, error: OSError, folder=folder) -> None:
            # The folder itself refused (a link, unreadable) is one problem, named once, not an entry left behind.
            if path in (folder, root):
                refused.add(folder)
                warn("clear", path, error)
            else:
                warn("remove", path, error)

        removed = clear_cache(CACHE_KINDS[option], on_error=not_removed)
        if folder in refused:
            print(f"{option}: nothing removed (see the warning)")
            continue
        left = f" ({failures - before} not removed: see the warnings)" if failures > before else ""
        print(f"{option}: removed {removed} entries from {folder}{left}")
    return EXIT_FAILURE if failures else EXIT_OK
