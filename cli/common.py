"""Pieces shared by the commands: the parser class, usage errors, argument checks."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import NoReturn, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from statemachine.durations import parse_instant


class UsageError(Exception):
    """A bad command-line argument; the message names the argument."""


class CommandLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, like the commands' own errors."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# What `add_subparsers` gives, for each command to add its parser to (a string: argparse's
# class takes a type argument only for the type checker).
Subparsers: TypeAlias = "argparse._SubParsersAction[CommandLineParser]"


def add_output(parser: argparse.ArgumentParser, what: str) -> None:
    """--output text|json (-o): `what` names the JSON document for the help."""
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text",
                        help=f"text for people (the default), or json: {what}")


def time_zone(name: str, option: str = "--tz") -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise UsageError(
            f"{option}: unknown time zone {name!r}; use an IANA name such as"
            " America/Los_Angeles or UTC"
        ) from None


def instant(text: str, option: str) -> datetime:
    """An ISO-8601 timestamp with an offset or `Z`, as an aware UTC datetime."""
    try:
        return parse_instant(text)
    except ValueError as error:
        raise UsageError(f"{option}: {error}") from None


def non_negative_int(text: str) -> int:
    """argparse `type=` for counts."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse `type=` for things counted from 1."""
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value
