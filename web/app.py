"""The Flask application factory. No work happens at import time."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from flask import Flask, Response, jsonify, request
from flask.json.provider import DefaultJSONProvider
from flask.typing import ResponseReturnValue
from werkzeug.routing import BaseConverter

from config.limits import MAX_REQUEST_BYTES
from config.settings import Settings
from engine.service import Engine
from web import access, errors, origins, tracing, ui, ui_audit, ui_format
from web.acl import Directory, load_directory
from web.api import api
from web.api_bulk import bulk_api
from web.api_jobs import jobs_api
from web.api_meta import meta_api
from web.guard import Guard, guard_from_settings
from web.identity import Identifier, identifier_from_settings
from web.internal import internal
from web.metrics import metrics_page
from web.sessions import SESSION_LIFETIME, csrf_token, signed_in
from web.signin import signin
from web.ui_actions import actions


class SegmentConverter(BaseConverter):
    """A path segment up to its first ':', so that `jobs/J:pause` is the pause of J and
    never a job named `J:pause` (no id may hold a ':')."""

    regex = "[^/:]+"


@dataclass(frozen=True)
class Gatekeepers:
    """Who may call what: users by their credentials and groups, the task queue and
    the cron service by what web/guard.py accepts."""

    identifier: Identifier
    directory: Directory
    guard: Guard


def gatekeepers_from_settings(settings: Settings) -> Gatekeepers:
    return Gatekeepers(identifier_from_settings(settings), load_directory(settings.admins, settings.groups_file),
                       guard_from_settings(settings))


def create_app(engine: Engine, settings: Settings, cron_jobs: Mapping[str, Callable[[], object]] | None = None,
               queue_depth: Callable[[], int] | None = None, gatekeepers: Gatekeepers | None = None,
               readiness: Callable[[], tuple[bool, dict[str, Any]]] | None = None) -> Flask:
    """An app over a built engine; `cron_jobs` maps cron names to callables;
    `queue_depth` counts waiting tasks where the queue is ours to count; `gatekeepers`
    are made from the settings unless given; `readiness` answers GET /readyz (ready,
    checks) from what it has kept, without storage I/O (None: no checks, always ready)."""
    gatekeepers = gatekeepers or gatekeepers_from_settings(settings)
    app = Flask("sundial")
    app.config["SUNDIAL_ENGINE"] = engine
    app.config["SUNDIAL_GUARD"] = gatekeepers.guard
    app.config["SUNDIAL_SETTINGS"] = settings
    app.config["SUNDIAL_CRON"] = cron_jobs or {}
    app.config["SUNDIAL_QUEUE_DEPTH"] = queue_depth
    if isinstance(app.json, DefaultJSONProvider):  # fields in the order the views give them
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
    tracing.install(app, settings.gcp_project)
    access.install(app, gatekeepers.identifier, gatekeepers.directory)
    origins.install(app, gatekeepers.identifier.open_access)
    app.register_blueprint(internal)
    app.register_blueprint(metrics_page)
    for blueprint in (api, jobs_api, bulk_api, meta_api):
        app.register_blueprint(blueprint)
    install_ui(app, settings)

    _install_health(app, readiness)

    if settings.demo_echo:
        @app.post("/demo/echo")
        def demo_echo() -> ResponseReturnValue:
            # The examples' heartbeat target, so that `make run` shows deliveries at once.
            return jsonify({"received": request.headers.get("X-Sundial-Invocation")})

    return app


def _install_health(app: Flask, readiness: Callable[[], tuple[bool, dict[str, Any]]] | None) -> None:
    # Liveness: the process answers. Nothing here touches storage, so it answers while
    # another process holds the database's write lock.
    @app.get("/healthz")
    def health() -> ResponseReturnValue:
        return jsonify({"ok": True})

    # Readiness: writes succeed and the dispatch loop goes round (503 naming what is wrong).
    @app.get("/readyz")
    def ready() -> ResponseReturnValue:
        is_ready, checks = readiness() if readiness is not None else (True, {})
        return jsonify({"ready": is_ready, "checks": checks}), 200 if is_ready else 503


# --- the web UI's wiring ----------------------------------------------------------------

# No page of Sundial's may be framed by another site (clickjacking its buttons), sniffed
# into another type, or leak its URL to the sites it links to.
SAFETY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def _page_safety_headers(response: Response) -> Response:
    for name, value in SAFETY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def _cookie_needs_https(settings: Settings) -> bool:
    """The session cookie travels only over HTTPS unless the server listens on loopback
    (where there is no network to read it on, and no TLS to ask for)."""
    if getattr(settings, "on_app_engine", False):
        return True
    host = str(getattr(settings, "host", "127.0.0.1")).strip("[]")
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host != "localhost"


def install_ui(app: Flask, settings: Settings) -> None:
    """Register the UI's blueprints on `app` and key its session cookie (CSRF tokens)."""
    # Every process on one database shares the task secret, so a form rendered by one
    # server may be posted to another; without one, a key of this process only.
    base = settings.task_secret.encode() if settings.task_secret else secrets.token_bytes(32)
    app.secret_key = hmac.new(base, b"sundial web ui session", hashlib.sha256).hexdigest()
    app.config.update(SESSION_COOKIE_NAME="sundial_session", SESSION_COOKIE_SAMESITE="Lax",
                      SESSION_COOKIE_SECURE=_cookie_needs_https(settings),
                      PERMANENT_SESSION_LIFETIME=SESSION_LIFETIME)
    app.after_request(_page_safety_headers)
    app.jinja_env.globals.update(csrf_token=csrf_token, signed_in=signed_in, utc=ui_format.utc_text,
                                 relative=ui_format.relative, local=ui_format.local_text,
                                 log_extras=ui_format.log_extras, reason_text=ui_format.reason_text)
    app.jinja_env.globals.update(job_audit=ui_audit.job_audit, actor_name=ui_audit.actor_name)
    app.register_blueprint(ui.ui)
    app.register_blueprint(actions)
    app.register_blueprint(signin)
