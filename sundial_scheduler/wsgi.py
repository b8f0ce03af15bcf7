"""The WSGI app of the installed package, for any WSGI server:
`gunicorn 'sundial_scheduler.wsgi:app'` (the backend and settings from the environment,
as `main:app` reads them in a checkout). It is built on first access, so importing this
module does no work beyond making the product's packages importable."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sundial_scheduler import use_product_packages

if TYPE_CHECKING:
    from flask import Flask

use_product_packages()


def __getattr__(name: str) -> Flask:
    if name == "app":
        from app.bootstrap import wsgi_app

        app = globals()["app"] = wsgi_app()
        return app
    raise AttributeError(name)
