"""Which of the chain's Cloud Tasks queues carries a job's tasks.

One queue dispatches at most 500 tasks a second, so a deployment with many jobs due at
the same instant spreads the chain over N queues (SUNDIAL_TASKS_QUEUE_SHARDS). Shard 0
keeps the configured queue's own name, so N = 1 is the single queue every deployment had
before, and raising N leaves that queue in use; shard i >= 1 is `{queue}-{i}`.

A job's shard is a stable hash of its project and id (sha256, never Python's `hash`,
which differs from one process to the next), so every process of every version agrees
on it for a given N. Nothing depends on which queue a task arrived by: after N changes,
tasks already waiting in a job's old shard still run, and the job's next tasks go to
its new one (docs/SCALE.md).
"""

from __future__ import annotations

import hashlib
import re

MAX_SHARDS = 500  # Cloud Tasks allows 1,000 queues per region by default; throttles need some


def shard_of(project: str, job: str, shards: int) -> int:
    """The shard (0 .. shards - 1) of job `project/job`."""
    if shards <= 1:
        return 0
    digest = hashlib.sha256(f"{project}/{job}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % shards


def shard_queue_id(queue: str, shard: int) -> str:
    """The Cloud Tasks queue id of shard `shard` of chain queue `queue`."""
    return queue if shard == 0 else f"{queue}-{shard}"


def chain_queue_ids(queue: str, shards: int) -> list[str]:
    """Every queue of the chain, shard 0 first."""
    return [shard_queue_id(queue, shard) for shard in range(max(shards, 1))]


def is_chain_queue(queue_id: str, queue: str) -> bool:
    """Whether `queue_id` is, or could be, one of chain queue `queue`'s shards, whatever
    N is now: a queue left from a larger N still delivers its tasks."""
    return queue_id == queue or re.fullmatch(rf"{re.escape(queue)}-[1-9][0-9]*", queue_id) is not None
