"""Internal handlers: the task queue's and the cron service's way in (docs/REFERENCE.md section 6).

Who may call them is web/guard.py's decision: on App Engine the queue and cron headers
are trusted (App Engine strips them from outside requests); anywhere else a task must
carry the secret that Sundial puts on every task it creates (an OIDC token alone is
refused), and a cron call that secret or an OIDC token of the configured service account.
"""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify, request
from flask.typing import ResponseReturnValue

from engine.ports import RetryTask, StoreError, Task
from statemachine.durations import parse_instant, rfc3339_millis
from statemachine.vocabulary import TaskKind
from web.context import current_engine
from web.errors import classify, error_response
from web.guard import Guard, RequestHeaders

TASK_KINDS = {kind.handler_path: kind for kind in TaskKind}

internal = Blueprint("internal", __name__, url_prefix="/internal")


def _allowed(cron: bool) -> bool:
    guard: Guard = current_app.config["SUNDIAL_GUARD"]  # create_app's gatekeepers
    return guard.admits(request.headers, cron)


def _forbidden() -> ResponseReturnValue:
    return error_response("PERMISSION_DENIED", "internal endpoint")


@internal.post("/tasks/<kind>")
def run_task(kind: str) -> ResponseReturnValue:
    if not _allowed(cron=False):
        return _forbidden()
    if kind not in TASK_KINDS:
        return error_response("NOT_FOUND", f"no task kind {kind!r}")
    body = request.get_json(silent=True) or {}
    try:
        task = Task(body.get("name", ""), TASK_KINDS[kind], body["payload"], parse_instant(body["eta"]),
                    retried=_retried(request.headers))
    except (KeyError, TypeError, ValueError) as error:
        # A malformed task will never succeed: answer 2xx so the queue drops it.
        return jsonify({"dropped": f"malformed task: {error!r}"}), 200
    # Every "not now" answers without 503 or 429, which Cloud Tasks takes for an
    # overloaded target and answers by slowing the whole queue (every job's chain).
    try:
        try:
            current_engine().tasks.handle(task)
        except RetryTask as retry:  # a tick that came early: a fresh copy waits for its time
            again = current_engine().tasks.hand_back(task, retry.delay)
            return jsonify({"handed_back": again.name, "eta": rfc3339_millis(again.eta)})
    except StoreError as error:
        # 500: the queue retries the task with its own backoff, and throttles nothing.
        code, message, _ = classify(error)
        return jsonify({"error": {"code": code, "message": message}}), 500
    return jsonify({"done": True})


def _retried(headers: RequestHeaders) -> bool:
    """Whether Cloud Tasks ran this task before without a 2xx answer: its retry count
    (HTTP tasks, or App Engine tasks) is above 0. Only the queue reaches this
    handler (guard.py), so the header is the queue's."""
    for name in ("X-CloudTasks-TaskRetryCount", "X-AppEngine-TaskRetryCount"):
        value = headers.get(name, "")
        if value.isdigit():
            return int(value) > 0
    return False


@internal.get("/cron/<name>")
def run_cron(name: str) -> ResponseReturnValue:
    if not _allowed(cron=True):
        return _forbidden()
    jobs = current_app.config["SUNDIAL_CRON"]
    if name not in jobs:
        return error_response("NOT_FOUND", f"no cron job {name!r}")
    return jsonify({name: jobs[name]()})
