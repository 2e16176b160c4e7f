"""The command line as the tests call it: in a new process as a user runs it (run_cli), or its main() in this
one (call_cli, cli_error), which saves a torch import and a model load per call."""

import contextlib
import io
import subprocess
import sys
from types import SimpleNamespace

from kvviz.cli.main import main

from app_tests import ROOT


def run_cli(*args):
    """`python -m kvviz *args` in a new process: the entry point as a user runs it."""
    return subprocess.run([sys.executable, "-m", "kvviz", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def call_cli(*args):
    """kvviz.cli.main.main(args) in this process, with what it printed; the result reads like run_cli's."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse refusals
            code = exit_.code
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def cli_error(capsys, *argv) -> str:
    """main(argv) refused in one line on stderr, "error: ..." (exit status 2): that line."""
    assert main(list(argv)) == 2
    message = capsys.readouterr().err.strip()
    assert message.startswith("error: ") and "\n" not in message and "Traceback" not in message, message
    return message
