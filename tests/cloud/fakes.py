"""A fake Cloud Tasks client that behaves like the service where it matters here: task
names are unique (ALREADY_EXISTS, also for names already run), schedule times more than
30 days ahead are refused, and `run_next` dispatches the earliest task to a Flask test
client the way Cloud Tasks dispatches an HTTP task."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

from google.api_core import exceptions as gexc

LIMIT = timedelta(days=30)


class FakeTasksClient:
    def __init__(self, clock=None):
        self.clock = clock
        self.created = []  # every task accepted, in order
        self.pending = []
        self.names = set()
        self.calls = 0
        self.fail_with: list[Exception] = []  # raised by the next create_task calls

    @staticmethod
    def queue_path(project, location, queue):
        return f"projects/{project}/locations/{location}/queues/{queue}"

    @staticmethod
    def common_location_path(project, location):
        return f"projects/{project}/locations/{location}"

    def create_task(self, parent, task, retry=None, timeout=None):
        self.calls += 1
        if self.fail_with:
            raise self.fail_with.pop(0)
        if task.name in self.names:
            raise gexc.AlreadyExists(f"Requested entity already exists: {task.name}")
        if self.clock is not None and schedule_time(task) - self.clock.now() > LIMIT:
            raise gexc.InvalidArgument("The Task.scheduleTime is too far in the future")
        self.names.add(task.name)
        self.created.append(task)
        self.pending.append(task)
        return task

    def run_next(self, client) -> tuple[object, int]:
        """Dispatch the earliest pending task at its schedule time: (task, status)."""
        task = min(self.pending, key=schedule_time)
        self.pending.remove(task)
        self.clock.current = max(self.clock.current, schedule_time(task))
        http = task.http_request
        response = client.post(urlsplit(http.url).path, data=bytes(http.body),
                               headers={**dict(http.headers), "X-CloudTasks-QueueName": "chain"})
        if response.status_code >= 300:
            self.pending.append(task)  # Cloud Tasks retries it (here: at once)
        return task, response.status_code


def schedule_time(task) -> datetime:
    value = task.schedule_time
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
