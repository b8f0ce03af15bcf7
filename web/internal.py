"""Internal handlers: the task queue's and the cron service's way in (CONTRACT section 6).

On App Engine the queue and cron headers are trusted (App Engine strips them
from outside requests). Anywhere else they prove nothing: a request must carry
the secret that Sundial puts on every task it creates.
"""

from __future__ import annotations

import hmac
from datetime import timedelta

from flask import Blueprint, current_app, jsonify, request

from engine.ports import RetryTask, StoreError, Task
from statemachine.durations import parse_instant

SECRET_HEADER = "X-Sundial-Task-Secret"
TASK_KINDS = {"tick": "tick", "start-invocation": "start", "trigger": "trigger"}

internal = Blueprint("internal", __name__, url_prefix="/internal")


def _allowed(cron: bool) -> bool:
    settings = current_app.config["SUNDIAL_SETTINGS"]
    if settings.on_app_engine:
        if cron:
            return request.headers.get("X-Appengine-Cron") == "true"
        return bool(
            request.headers.get("X-AppEngine-QueueName") or request.headers.get("X-CloudTasks-QueueName")
        )
    given = request.headers.get(SECRET_HEADER, "")
    return bool(given) and hmac.compare_digest(given, settings.task_secret)


def _forbidden():
    return jsonify({"error": {"code": "PERMISSION_DENIED", "message": "internal endpoint"}}), 403


@internal.post("/tasks/<kind>")
def run_task(kind: str):
    if not _allowed(cron=False):
        return _forbidden()
    if kind not in TASK_KINDS:
        return jsonify({"error": {"code": "NOT_FOUND", "message": f"no task kind {kind!r}"}}), 404
    body = request.get_json(silent=True) or {}
    engine = current_app.config["SUNDIAL_ENGINE"]
    try:
        task = Task(body.get("name", ""), TASK_KINDS[kind], body["payload"], parse_instant(body["eta"]))
    except (KeyError, TypeError, ValueError) as error:
        # A malformed task will never succeed: answer 2xx so the queue drops it.
        return jsonify({"dropped": f"malformed task: {error!r}"}), 200
    try:
        engine.handle_task(task)
    except RetryTask as retry:
        seconds = max(retry.delay / timedelta(seconds=1), 0.001)
        return jsonify({"retry_in_s": seconds}), 503, {"Retry-After": f"{seconds:.3f}"}
    except StoreError as error:
        return jsonify({"error": {"code": "UNAVAILABLE", "message": str(error)}}), 503
    return jsonify({"done": True})


@internal.get("/cron/<name>")
def run_cron(name: str):
    if not _allowed(cron=True):
        return _forbidden()
    jobs = current_app.config["SUNDIAL_CRON"]
    if name not in jobs:
        return jsonify({"error": {"code": "NOT_FOUND", "message": f"no cron job {name!r}"}}), 404
    return jsonify({name: jobs[name]()})
