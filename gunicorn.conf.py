"""gunicorn's settings, read from the working directory (app.yaml's entrypoint runs
`gunicorn ... main:app` from the app's root): its own log lines in the same JSON shape
as the app's, so that stderr holds nothing else (engine/logs.py).

gunicorn's lines ("Starting gunicorn", "Booting worker", a worker that failed to load
the app) go to the root logger's JSON handler; the worker's app replaces that handler
with its own at the level of SUNDIAL_LOG_LEVEL. Its access log stays off, as without
this file: App Engine writes a request log of its own. Python's own writes to stderr
(warnings, uncaught exceptions) become JSON lines in the master as in the workers.
"""

logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "root": {"level": "INFO", "handlers": ["json"]},
    "loggers": {
        "gunicorn.error": {"level": "INFO", "handlers": [], "propagate": True},
        # A config dictionary turns gunicorn's access log on; its lines are INFO.
        "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": False},
    },
    "handlers": {"json": {"()": "engine.logs.json_lines_handler"}},
    "formatters": {},
}


def on_starting(server) -> None:
    from engine.logs import send_python_output_to_logs

    send_python_output_to_logs()  # the master's; the workers inherit it, and main:app sets it again
