"""The chain's task queue on Cloud Tasks: every Task becomes a task that POSTs to Sundial's
own internal task handler (web/internal.py), in one of two forms chosen when the queue is
built (`AppEngineTarget`):

- On App Engine, App Engine tasks (`app_engine_http_request`, relative URI
  `/internal/tasks/<kind>`): Cloud Tasks hands them to the app inside Google, so
  Identity-Aware Proxy and the App Engine firewall (its default rule set to deny) never
  stand in their way, they carry `X-AppEngine-QueueName`, which App Engine strips from
  outside requests (the guard trusts it there), and they cost no egress.
- Elsewhere (Cloud Run, `serve` on a VM), HTTP tasks to the service URL, with an OIDC
  token of the configured service account when there is one.

Cloud Tasks is not transactional, so the Datastore store calls `enqueue_now` after its
commit. What makes that safe:

- Names are deterministic, so re-sending one enqueue (an RPC retried after a lost
  answer) cannot make a second task: ALREADY_EXISTS is success. Cloud Tasks wants the
  start of a name spread out (sequential prefixes make hot spots in its index), so the
  name opens with a hash: `{sha256(name)[:12]}-{the name, sanitized}`.
- Cloud Tasks refuses a schedule_time more than 30 days away. A task due later is
  scheduled 29 days out (a "hop") with its real ETA kept in the body; the tick arrives
  early, the state machine re-arms it for the same time under a fresh nonce (so a new
  name, which Cloud Tasks will take), and that enqueue goes one hop further.
- An enqueue that still fails after its retries is logged and counted, not raised: the
  transaction has committed. One call waits at most `ENQUEUE_BUDGET` for Cloud Tasks, all
  its tasks together, so an API write answers within seconds while the queue is down;
  what failed is kept (unsent_tasks.py) and created again by `resend_unsent` (`serve`'s
  requeue loop, every second) once the queue answers, and a chain whose task was lost
  all the same is what the watchdog repairs.

Shards: the chain's tasks of a job go to one of N queues (`shards`), chosen by a stable
hash of the job's name (statemachine/shards.py): one queue dispatches at most 500 tasks a
second, N of them 500 N. Names stay deterministic and a task is created by the one
process whose commit made it, so changing N cannot make a second task of one name; a
task already waiting in a job's former shard still runs, since no handler asks where a
task came from, and the chain's nonces make any stray copy a no-op all the same.

Throttles: a throttled job's start tasks (Task.queue = "PROJECT/THROTTLE") go to a
queue of their own, `throttle_queue_id(chain queue, ...)`, e.g. `sundial-t-myproj-backup-
consumers-1a2b3c4d`, whose `max_concurrent_dispatches` is the throttle's `max_in_flight`.
The task handler delivers before it answers, so Cloud Tasks' concurrency limit is the
limit on requests in flight. `main.py queues` creates those queues from the config files
(and `serve` on the cloud backend creates the ones it sees at import, when it may).

Every task carries the shared secret (`X-Sundial-Task-Secret`): the guard
(web/guard.py) admits a task by it wherever Sundial runs, App Engine tasks too (a second
proof beside the platform's header), and never by a token alone, so a queue without a
secret is refused at construction. An HTTP task also carries an OIDC token for the
configured service account, with the service URL as audience, for Cloud Run's own IAM
check (`--no-allow-unauthenticated`); an App Engine task cannot carry one.
Throttle queues get the same form of task as the chain's queue.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Callable

from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.cloud import tasks_v2
from google.protobuf import field_mask_pb2

from engine.adapters.cloud.unsent_tasks import UnsentTasks
from engine.logs import log_event
from engine.ports import Clock, Task
from statemachine.durations import rfc3339_millis
from statemachine.shards import chain_queue_ids, shard_of
from statemachine.vocabulary import TaskKind, task_kind

log = logging.getLogger("sundial.cloud_tasks")

SECRET_HEADER = "X-Sundial-Task-Secret"
# Cloud Tasks' limit is 30 days ahead; a day less leaves room for clock skew.
MAX_HOP = timedelta(days=29)
# How long Cloud Tasks waits for a task handler's answer before it counts the run as
# failed and retries the task. A handler delivers one attempt (at most 9 minutes on the
# cloud backend: config/limits.MAX_ATTEMPT_TIMEOUT) and records it; App Engine stops a
# request after 10 minutes under automatic scaling, which is also the longest an HTTP
# handler is given here. A retry after it means the earlier run is over (events.TickArrived).
DISPATCH_DEADLINE = timedelta(minutes=10)
TASK_ID_LIMIT = 500  # Cloud Tasks: [A-Za-z0-9_-]{1,500}
QUEUE_ID_LIMIT = 100  # Cloud Tasks: [A-Za-z0-9-]{1,100}
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_UNSAFE_IN_QUEUE = re.compile(r"[^A-Za-z0-9-]+")
_RPC_TIMEOUT = 10.0  # seconds per CreateTask call
# Seconds one enqueue_now (an API write's, a task handler's) waits on Cloud Tasks in all,
# retries included: an outage costs a caller this, never the 30 s of _RETRY per task.
ENQUEUE_BUDGET = 3.0
RECONNECT_WITHIN_A_SECOND = [("grpc.initial_reconnect_backoff_ms", 250), ("grpc.min_reconnect_backoff_ms", 250),
                             ("grpc.max_reconnect_backoff_ms", 1000)]
# Transient failures are retried here, under the same name: a retry of a call that
# did reach Cloud Tasks then gets ALREADY_EXISTS, which is success.
_TRANSIENT = (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError, gexc.TooManyRequests,
              gexc.Aborted)
_MENDABLE = (*_TRANSIENT, gexc.RetryError)  # kept to be created again (unsent_tasks.py)
_RETRY = gretry.Retry(predicate=gretry.if_exception_type(*_TRANSIENT), initial=0.1, maximum=2.0, multiplier=2.0,
                      timeout=30.0)


def build_tasks_client(emulator_host: str | None = None) -> tasks_v2.CloudTasksClient:
    """A Cloud Tasks client: the real service with Application Default Credentials, or
    the emulator at `emulator_host` (host:port) over a plain, unauthenticated channel."""
    if not emulator_host:
        return tasks_v2.CloudTasksClient()
    import grpc
    from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

    # gRPC waits up to 2 minutes between reconnections to a server that refused it, and
    # fails every call meanwhile: an emulator back after an outage would go unused that long.
    channel = grpc.insecure_channel(emulator_host, options=RECONNECT_WITHIN_A_SECOND)
    return tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))


def task_id(name: str) -> str:
    """A Cloud Tasks task id for a Sundial task name: hashed prefix, sanitized tail."""
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:12]
    tail = _UNSAFE.sub("_", name)[: TASK_ID_LIMIT - len(digest) - 1]
    return f"{digest}-{tail}"


def throttle_queue_id(chain_queue: str, queue: str) -> str:
    """The Cloud Tasks queue id of a throttle's logical queue ("PROJECT/THROTTLE"):
    `{chain queue}-t-{project}-{throttle}`, sanitized to letters, digits and '-', cut to
    fit, and ended with a hash of the logical name, so that two throttles whose names
    sanitize alike (`a.b`, `a_b`) never share a queue."""
    digest = hashlib.sha256(queue.encode("utf-8")).hexdigest()[:8]
    project, _, throttle = queue.partition("/")
    readable = _UNSAFE_IN_QUEUE.sub("-", f"{chain_queue}-t-{project}-{throttle}").strip("-")
    return f"{readable[: QUEUE_ID_LIMIT - len(digest) - 1]}-{digest}"


@dataclass(frozen=True)
class AppEngineTarget:
    """App Engine tasks to this project's App Engine app, routed to `service` ("" is the
    app's default service). No version is named: Cloud Tasks then sends each attempt to
    the version serving when it is attempted, so after a deploy the chain moves to the
    new version with the traffic, and pending tasks never pin an old one."""

    service: str = ""


class CloudTasksQueue:
    """Enqueues the chain's tasks on one Cloud Tasks queue, right after a commit."""

    def __init__(
        self,
        client: tasks_v2.CloudTasksClient,
        project: str,
        location: str,
        queue: str,
        service_url: str,
        secret: str,
        service_account_email: str = "",
        *,
        clock: Clock,
        copies: int = 1,
        app_engine: AppEngineTarget | None = None,
        shards: int = 1,
    ) -> None:
        """`app_engine`: create App Engine tasks routed so, instead of HTTP tasks to
        `service_url`. `copies`: create every task this many times (fault injection: the
        real service refuses the copies by name; an emulator that does not deduplicate
        delivers each one, which is how tests prove duplicates are harmless). `shards`:
        how many queues carry the chain, `queue` being the first."""
        if not service_url and app_engine is None:
            raise ValueError("CloudTasksQueue needs the service URL that Cloud Tasks calls back")
        if not secret:
            raise ValueError("CloudTasksQueue needs the task secret: the task handlers admit no task without it")
        self.client = client
        self.shard_paths = [client.queue_path(project, location, one) for one in chain_queue_ids(queue, shards)]
        self.queue_path = self.shard_paths[0]
        self._queue_path_of: Callable[[str], str] = lambda logical: client.queue_path(
            project, location, throttle_queue_id(queue, logical))
        self.service_url = service_url.rstrip("/")
        self.secret = secret
        self.service_account_email = service_account_email
        self.clock = clock
        self.counters: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.copies = copies
        self.app_engine = app_engine
        self.budget = ENQUEUE_BUDGET
        self.unsent = UnsentTasks()

    def enqueue_now(self, tasks: list[Task]) -> None:
        """Create one Cloud Tasks task per Task, within `budget` seconds in all. Never
        raises for Cloud Tasks' failures: each is logged, counted and kept for
        `resend_unsent`."""
        now, until = self.clock.now(), time.monotonic() + self.budget
        for task in tasks:
            for _ in range(self.copies):
                cloud_task = self.cloud_task(task, now)
                if not self._create(cloud_task, until):
                    self._keep(cloud_task)

    def resend_unsent(self) -> int:
        """Create again the tasks whose creation failed, oldest first, until one fails
        again (the queue is still down: the next call tries again); returns how many were
        settled (created, or refused for good)."""
        created = 0
        for cloud_task in self.unsent.oldest_first():
            if not self._create(cloud_task, time.monotonic() + self.budget):
                break
            self.unsent.created(cloud_task)
            created += 1
        if created:
            log_event(log, "unsent tasks created", count=created, left=len(self.unsent))
        return created

    def _keep(self, cloud_task: tasks_v2.Task) -> None:
        dropped = self.unsent.keep(cloud_task)
        if dropped is not None:
            log_event(log, "unsent task dropped", level=logging.ERROR, task=dropped, kept=self.unsent.limit)

    def path_of(self, task: Task) -> str:
        """The queue `task` goes on: its job's shard of the chain, or its throttle's. A
        task of no job (none of today's kinds) goes to the first shard."""
        if task.queue:
            return self._queue_path_of(task.queue)
        project, job = task.payload.get("project"), task.payload.get("job")
        if len(self.shard_paths) == 1 or not isinstance(project, str) or not isinstance(job, str):
            return self.queue_path
        return self.shard_paths[shard_of(project, job, len(self.shard_paths))]

    def cloud_task(self, task: Task, now: datetime) -> tasks_v2.Task:
        """The Cloud Tasks task for `task`, as it is enqueued at `now`. The dispatch
        deadline suits both forms: an App Engine task may have up to 24 hours, and App
        Engine's automatic scaling ends the request at 10 minutes anyway."""
        cloud_task = tasks_v2.Task(
            name=f"{self.path_of(task)}/tasks/{task_id(task.name)}",
            schedule_time=min(task.eta, now + MAX_HOP),
            dispatch_deadline=DISPATCH_DEADLINE,
        )
        if self.app_engine is not None:
            cloud_task.app_engine_http_request = self._app_engine_request(task, self.app_engine)
        else:
            cloud_task.http_request = self._http_request(task)
        return cloud_task

    def _request_parts(self, task: Task) -> tuple[str, dict[str, str], bytes]:
        """The handler's path, the headers and the body, the same in both forms."""
        kind = task_kind(task.kind)
        if not isinstance(kind, TaskKind):
            raise ValueError(f"no task handler for kind {task.kind!r}")
        body = {"name": task.name, "payload": task.payload, "eta": rfc3339_millis(task.eta)}
        # Cloud Tasks' default type is octet-stream; the secret is the task's proof (web/guard.py).
        headers = {"Content-Type": "application/json", SECRET_HEADER: self.secret}
        return f"/internal/tasks/{kind.handler_path}", headers, json.dumps(body, separators=(",", ":")).encode()

    def _app_engine_request(self, task: Task, target: AppEngineTarget) -> tasks_v2.AppEngineHttpRequest:
        path, headers, body = self._request_parts(task)
        return tasks_v2.AppEngineHttpRequest(
            relative_uri=path, http_method=tasks_v2.HttpMethod.POST, headers=headers, body=body,
            app_engine_routing=tasks_v2.AppEngineRouting(service=target.service),
        )

    def _http_request(self, task: Task) -> tasks_v2.HttpRequest:
        path, headers, body = self._request_parts(task)
        request = tasks_v2.HttpRequest(
            url=f"{self.service_url}{path}", http_method=tasks_v2.HttpMethod.POST, headers=headers, body=body,
        )
        if self.service_account_email:
            # Without an explicit audience Cloud Tasks would use the full task URL; the
            # guard checks for the service URL.
            request.oidc_token = tasks_v2.OidcToken(
                service_account_email=self.service_account_email, audience=self.service_url
            )
        return request

    def _create(self, cloud_task: tasks_v2.Task, until: float) -> bool:
        """Create the task, retrying until time.monotonic() reads `until`. False: it failed
        in a way a later try may mend (the queue down or slow); a refusal for good (a bad
        task) is logged and counted, and True as there is nothing to try again."""
        self._count("enqueues")
        left = until - time.monotonic()
        if left <= 0:  # the call's budget went to the tasks before this one
            return self._failed(cloud_task, "no time left of the enqueue's budget", True)
        try:
            self.client.create_task(
                parent=cloud_task.name.rsplit("/tasks/", 1)[0], task=cloud_task,
                retry=_RETRY.with_timeout(left), timeout=min(_RPC_TIMEOUT, left),
            )
        except gexc.AlreadyExists:
            self._count("already_exists")  # sent before (or a retry that did arrive): done
        except (gexc.GoogleAPICallError, gexc.RetryError) as error:
            return self._failed(cloud_task, _describe(error), isinstance(error, _MENDABLE))
        return True

    def _failed(self, cloud_task: tasks_v2.Task, error: str, mendable: bool) -> bool:
        self._count("enqueue_failures")
        log_event(log, "enqueue failed", level=logging.ERROR, task=cloud_task.name, error=error)
        return not mendable

    def _count(self, name: str) -> None:
        with self._lock:
            self.counters[name] += 1


def _describe(error: Exception) -> str:
    code = getattr(error, "grpc_status_code", None)
    name = code.name if code is not None else type(error).__name__
    return f"{name} {getattr(error, 'message', '') or error}"[:300]


# --- queue administration ------------------------------------------------------------


@dataclass(frozen=True)
class QueueSpec:
    """What a queue should look like. The chain's tasks are small and quick; its
    retries are short because an early tick asks to be retried within a second, and a
    task that keeps failing is repaired by the watchdog anyway."""

    queue_id: str
    max_dispatches_per_second: float = 500.0
    max_concurrent_dispatches: int = 1000
    max_attempts: int = 100
    min_backoff: timedelta = timedelta(milliseconds=100)
    max_backoff: timedelta = timedelta(seconds=60)
    max_doublings: int = 10

    def queue(self, client: tasks_v2.CloudTasksClient, project: str, location: str) -> tasks_v2.Queue:
        return tasks_v2.Queue(
            name=client.queue_path(project, location, self.queue_id),
            rate_limits=tasks_v2.RateLimits(
                max_dispatches_per_second=self.max_dispatches_per_second,
                max_concurrent_dispatches=self.max_concurrent_dispatches,
            ),
            retry_config=tasks_v2.RetryConfig(
                max_attempts=self.max_attempts,
                min_backoff=self.min_backoff,
                max_backoff=self.max_backoff,
                max_doublings=self.max_doublings,
            ),
        )


_SETTINGS_MASK = [
    "rate_limits.max_dispatches_per_second",
    "rate_limits.max_concurrent_dispatches",
    "retry_config.max_attempts",
    "retry_config.min_backoff",
    "retry_config.max_backoff",
    "retry_config.max_doublings",
]


def ensure_queue(client: tasks_v2.CloudTasksClient, project: str, location: str, spec: QueueSpec,
                 update: bool = True) -> str:
    """Create the queue, or (with `update`) bring an existing one to `spec`. Idempotent.

    Returns "created", "updated" or "exists". (gcloud-tasks-emulator never says
    ALREADY_EXISTS: it answers a second create with the existing queue, so there it is
    always "created".)
    :raises google.api_core.exceptions.PermissionDenied: the caller may not manage queues.
    """
    queue = spec.queue(client, project, location)
    parent = client.common_location_path(project, location)
    try:
        client.create_queue(parent=parent, queue=queue, timeout=_RPC_TIMEOUT)
        return "created"
    except gexc.AlreadyExists:
        if not update:
            return "exists"
    mask = field_mask_pb2.FieldMask(paths=_SETTINGS_MASK)
    client.update_queue(queue=queue, update_mask=mask, timeout=_RPC_TIMEOUT)
    return "updated"


def chain_specs(chain_queue: str, shards: int) -> list[QueueSpec]:
    """The chain's queues: every shard, with the same settings."""
    return [QueueSpec(queue_id) for queue_id in chain_queue_ids(chain_queue, shards)]


def throttle_specs(chain_queue: str, throttles: dict[str, int]) -> list[QueueSpec]:
    """The queue of each throttle ("PROJECT/THROTTLE" -> max_in_flight)."""
    return [
        QueueSpec(throttle_queue_id(chain_queue, queue), max_concurrent_dispatches=max(limit, 1))
        for queue, limit in sorted(throttles.items())
    ]


def provision_queues(client: tasks_v2.CloudTasksClient, project: str, location: str,
                     specs: list[QueueSpec]) -> list[tuple[str, str]]:
    """`main.py queues`: create or update each queue; (queue path, what happened) each:
    the chain's queues (every shard) and one per throttle."""
    return [
        (client.queue_path(project, location, spec.queue_id), ensure_queue(client, project, location, spec))
        for spec in specs
    ]
