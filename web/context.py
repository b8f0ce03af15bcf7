"""The engine a request runs against: the one accessor every view uses.

create_app puts the engine built by the composition root in the app's config; views
reach it only through here (reads through `queries()`, changes through
engine/operations.py with `current_engine()`).
"""

from __future__ import annotations

from flask import current_app

from engine.queries import Queries
from engine.service import Engine


def current_engine() -> Engine:
    engine: Engine = current_app.config["SUNDIAL_ENGINE"]
    return engine


def queries() -> Queries:
    return current_engine().queries
