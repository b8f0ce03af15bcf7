"""The Flask application factory. No work happens at import time."""

from __future__ import annotations

from flask import Flask, jsonify, request
from werkzeug.routing import BaseConverter

from config.limits import MAX_REQUEST_BYTES
from web import access, errors, origins
from web.api import api
from web.api_jobs import jobs_api
from web.api_meta import meta_api
from web.internal import internal
from web.metrics import metrics_page
from web.ui import install_ui


class SegmentConverter(BaseConverter):
    """A path segment up to its first ':', so that `jobs/J:pause` is the pause of J and
    never a job named `J:pause` (no id may hold a ':')."""

    regex = "[^/:]+"


def create_app(engine, settings, cron_jobs: dict | None = None, queue_depth=None) -> Flask:
    """An app over a built engine; `cron_jobs` maps cron names to callables;
    `queue_depth` counts waiting tasks where the queue is ours to count."""
    app = Flask("sundial")
    app.config["SUNDIAL_ENGINE"] = engine
    app.config["SUNDIAL_SETTINGS"] = settings
    app.config["SUNDIAL_CRON"] = cron_jobs or {}
    app.config["SUNDIAL_QUEUE_DEPTH"] = queue_depth
    app.json.sort_keys = False
    app.url_map.converters["id"] = SegmentConverter
    # Werkzeug answers `//` and `%2F` in a path, and a missing trailing slash, with a
    # redirect built from the request's Host header: a redirect to any host a caller
    # names. Such paths are simply not found here.
    app.url_map.merge_slashes = False
    app.url_map.strict_slashes = False
    # Reading a larger body raises 413 (PAYLOAD_TOO_LARGE); tasks are far smaller.
    app.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BYTES
    errors.install(app)
    access.install(app)
    origins.install(app, app.config["SUNDIAL_IDENTIFIER"].open_access)
    app.register_blueprint(internal)
    app.register_blueprint(metrics_page)
    for blueprint in (api, jobs_api, meta_api):
        app.register_blueprint(blueprint)
    install_ui(app, settings)

    @app.get("/healthz")
    def health():
        return jsonify({"ok": True})

    if settings.demo_echo:
        @app.post("/demo/echo")
        def demo_echo():
            # The examples' heartbeat target, so that `make run` shows deliveries at once.
            return jsonify({"received": request.headers.get("X-Sundial-Invocation")})

    return app
