"""What APScheduler runs in the side-by-side benchmark: the job function, and the
thread-pool executor that tells it which run time it is running for.

The job function lives in a module of its own, imported by its dotted name, because
the SQLAlchemy job store keeps a textual reference to it (`bench.aps_job:deliver`)
and the job must resolve to this very module in the scheduler's process (a script
run as `__main__` would be a second copy with its own thread-locals).

APScheduler 3 does not pass the scheduled run time to the job. `LabelledThreadPoolExecutor`
is APScheduler's own `ThreadPoolExecutor` with one change: before APScheduler's
unchanged `run_job` runs in the pool thread, the run time it was submitted for is put
in a thread-local, so that `deliver` can send it as X-Sundial-Scheduled-Time. The
misfire check, max_instances and coalescing stay APScheduler's.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timezone

import requests
from apscheduler.executors.base import run_job
from apscheduler.executors.pool import ThreadPoolExecutor
from requests.adapters import HTTPAdapter

_current = threading.local()
_session: requests.Session | None = None
_session_lock = threading.Lock()
POOL_SIZE = 32  # set by the scheduler process to its worker count before it starts


def session() -> requests.Session:
    """One keep-alive session for every worker thread, as Sundial's HttpTarget has: the
    best a user of `requests` would do, so that the comparison is not about TCP connects."""
    global _session
    with _session_lock:
        if _session is None:
            _session = requests.Session()
            _session.trust_env = False
            adapter = HTTPAdapter(pool_connections=POOL_SIZE, pool_maxsize=POOL_SIZE, max_retries=0)
            _session.mount("http://", adapter)
        return _session


def deliver(job: str, url: str) -> None:
    """The job: one POST with the headers Sundial would send, a fresh invocation id per run."""
    run_time = _current.run_time
    headers = {
        "X-Sundial-Job": job,
        "X-Sundial-Invocation": uuid.uuid4().hex,
        "X-Sundial-Scheduled-Time": run_time.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        "X-Sundial-Attempt": "1",
        "Content-Type": "application/json",
    }
    response = session().post(url, data=b"{}", headers=headers, timeout=(10, 60))
    response.raise_for_status()  # an error answer is a job error (EVENT_JOB_ERROR), as a user would write


def _run_job_labelled(job, jobstore_alias, run_times, logger_name):
    # coalesce=True (the default) leaves one run time per submission; with more,
    # every call would carry the latest.
    _current.run_time = run_times[-1].astimezone(timezone.utc)
    return run_job(job, jobstore_alias, run_times, logger_name)


class LabelledThreadPoolExecutor(ThreadPoolExecutor):
    def _do_submit_job(self, job, run_times):
        # BasePoolExecutor._do_submit_job of APScheduler 3.11, with the labelled run_job.
        def callback(f):
            exc = f.exception()
            if exc:
                self._run_job_error(job.id, exc, getattr(exc, "__traceback__", None))
            else:
                self._run_job_success(job.id, f.result())

        f = self._pool.submit(_run_job_labelled, job, job._jobstore_alias, run_times, self._logger.name)
        f.add_done_callback(callback)
