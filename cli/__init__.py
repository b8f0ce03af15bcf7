"""The command line: one argparse sub-command per entry of COMMANDS.

Adding a command is one function: write `add_NAME(subparsers)` that adds its parser and
calls `set_defaults(run=...)`, where `run(args) -> int` returns the exit status, then list
it in COMMANDS. A `run` that meets a bad argument raises UsageError; main() turns that
into one line on stderr and exit status 2, the same as argparse's own errors.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Sequence

from cli import backup, operate, preview, projects, queues, serve, validate
from cli.common import CommandLineParser, Subparsers, UsageError
from cli.version import __version__

__all__ = ["COMMANDS", "UsageError", "build_parser", "main"]

AddCommand = Callable[[Subparsers], None]

COMMANDS: list[AddCommand] = [
    preview.add_next,
    preview.add_render,
    validate.add_validate,
    serve.add_serve,
    queues.add_queues,
    projects.add_projects,
    operate.add_jobs,
    operate.add_invocations,
    backup.add_backup,
]


def build_parser() -> CommandLineParser:
    parser = CommandLineParser(
        prog=program_name(),
        description="Sundial, a durable job scheduler.",
    )
    parser.add_argument("--version", action="version", version=f"sundial {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add_command in COMMANDS:
        add_command(subparsers)
    return parser


def program_name() -> str:
    # `sundial` when started as the installed console script, else the file people run
    # (`python main.py`); the usage and error lines then name what the user typed.
    return "sundial" if Path(sys.argv[0]).stem == "sundial" else "main.py"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        status: int = args.run(args)  # the command's run_* function, set by its parser
        return status
    except UsageError as error:
        print(f"{parser.prog} {args.command}: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`main.py next ... | head -1`): not an error. Point stdout
        # at devnull so that the interpreter's final flush does not complain again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
