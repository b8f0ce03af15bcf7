"""Sundial's command line: `python main.py COMMAND ...`; see `python main.py --help`.

The commands live in `cli/`; this file only hands over to them. It also gives
gunicorn its WSGI app (`main:app`, as app.yaml says), built on first access so
that importing this module does no work.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from cli import main

if TYPE_CHECKING:
    from flask import Flask


def __getattr__(name: str) -> Flask:
    if name == "app":
        from app.bootstrap import wsgi_app

        app = globals()["app"] = wsgi_app()
        return app
    raise AttributeError(name)


if __name__ == "__main__":
    sys.exit(main())
