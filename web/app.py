"""The Flask application factory. No work happens at import time."""

from __future__ import annotations

from flask import Flask, jsonify, request

from web import errors
from web.api import api
from web.internal import internal


def create_app(engine, settings, cron_jobs: dict | None = None) -> Flask:
    """An app over a built engine; `cron_jobs` maps cron names to callables."""
    app = Flask("sundial")
    app.config["SUNDIAL_ENGINE"] = engine
    app.config["SUNDIAL_SETTINGS"] = settings
    app.config["SUNDIAL_CRON"] = cron_jobs or {}
    app.json.sort_keys = False
    errors.install(app)
    app.register_blueprint(internal)
    app.register_blueprint(api)

    @app.get("/healthz")
    def health():
        return jsonify({"ok": True})

    if settings.demo_echo:
        @app.post("/demo/echo")
        def demo_echo():
            # The examples' heartbeat target, so that `make run` shows deliveries at once.
            return jsonify({"received": request.headers.get("X-Sundial-Invocation")})

    return app
