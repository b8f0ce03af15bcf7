"""The chain over several Cloud Tasks queues, on gcloud-tasks-emulator: each job's tasks
go through its own shard, a task left in a job's former shard still arrives after the
shard count changes, and `main.py queues` creates every shard."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from config.settings import Settings
from engine.adapters.cloud.cloud_tasks_queue import CloudTasksQueue, chain_specs, ensure_queue, task_id
from engine.clock import SystemClock
from engine.ports import Task
from statemachine.shards import shard_of, shard_queue_id
from tests.cloud.test_cloud_tasks_emulator import LOCATION, PROJECT, client, serving, wait_for  # noqa: F401

SECRET = "emulator-secret"


def _queues(client, name: str, shards: int) -> None:  # noqa: F811
    for spec in chain_specs(name, shards):
        ensure_queue(client, PROJECT, LOCATION, spec)


def _tick(job: str, nonce: str, eta: datetime) -> Task:
    return Task(f"tick/p/{job}/{nonce}", "tick", {"project": "p", "job": job, "nonce": nonce}, eta)


def _arrived_by_queue(seen: list[dict]) -> dict[str, str]:
    """Task id -> the queue id it came through, from the emulator's request headers."""
    return {h["X-Cloudtasks-Taskname"]: h["X-Cloudtasks-Queuename"].rsplit("/", 1)[-1]
            for h in seen if "X-Cloudtasks-Taskname" in h}


def test_each_jobs_tasks_arrive_through_the_queue_of_its_shard(client):  # noqa: F811
    _queues(client, "sharded", 4)
    jobs = [f"j{i}" for i in range(8)]
    assert len({shard_of("p", job, 4) for job in jobs}) == 4  # every shard has work
    with serving(Settings(task_secret=SECRET)) as (url, engine, seen):
        queue = CloudTasksQueue(client, PROJECT, LOCATION, "sharded", url, SECRET, clock=SystemClock(), shards=4)
        ticks = [_tick(job, "1.1", datetime.now(timezone.utc)) for job in jobs]
        queue.enqueue_now(ticks)
        assert len(wait_for(engine.handled, len(ticks))) == len(ticks)
    arrived = _arrived_by_queue(seen)
    assert {arrived[task_id(t.name)] for t in ticks} == {"sharded", "sharded-1", "sharded-2", "sharded-3"}
    for tick in ticks:
        assert arrived[task_id(tick.name)] == shard_queue_id("sharded", shard_of("p", tick.payload["job"], 4))


def test_a_task_waiting_in_a_jobs_former_shard_still_arrives_after_the_count_changes(client):  # noqa: F811
    """A deploy from N = 4 to N = 1: the tick the old version enqueued waits in shard 3,
    the new version's next tick goes to the first queue; both arrive, once each."""
    job = next(f"j{i}" for i in range(20) if shard_of("p", f"j{i}", 4) == 3)
    _queues(client, "moving", 4)
    with serving(Settings(task_secret=SECRET)) as (url, engine, seen):
        before = CloudTasksQueue(client, PROJECT, LOCATION, "moving", url, SECRET, clock=SystemClock(), shards=4)
        after = CloudTasksQueue(client, PROJECT, LOCATION, "moving", url, SECRET, clock=SystemClock(), shards=1)
        eta = datetime.now(timezone.utc) + timedelta(milliseconds=500)
        old, new = _tick(job, "1.1", eta), _tick(job, "1.2", eta + timedelta(milliseconds=300))
        before.enqueue_now([old])
        after.enqueue_now([new])
        assert sorted(t.name for t in wait_for(engine.handled, 2)) == [old.name, new.name]
    arrived = _arrived_by_queue(seen)
    assert arrived[task_id(old.name)] == "moving-3" and arrived[task_id(new.name)] == "moving"
    assert sorted(t.name for t in engine.handled) == [old.name, new.name]  # neither twice


def test_the_queues_command_creates_and_prints_every_shard(tasks_emulator, client, monkeypatch, capsys):  # noqa: F811
    from cli import main

    monkeypatch.setenv("SUNDIAL_TASKS_EMULATOR_HOST", tasks_emulator.host)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    monkeypatch.setenv("SUNDIAL_TASKS_LOCATION", LOCATION)
    monkeypatch.setenv("SUNDIAL_TASKS_QUEUE", "cli-shards")
    monkeypatch.setenv("SUNDIAL_TASKS_QUEUE_SHARDS", "2")
    assert main(["queues", "--shards", "3", "--configs", "/nonexistent"]) == 0  # the flag wins
    base = f"projects/{PROJECT}/locations/{LOCATION}/queues/cli-shards"
    printed = [line.split(": ")[0] for line in capsys.readouterr().out.splitlines()]
    assert printed == [base, f"{base}-1", f"{base}-2"]
    existing = {q.name for q in client.list_queues(parent=f"projects/{PROJECT}/locations/{LOCATION}")}
    assert {base, f"{base}-1", f"{base}-2"} <= existing
    assert f"{base}-3" not in existing
    assert main(["queues", "--configs", "/nonexistent"]) == 0  # from the environment: 2
    assert [line.split(": ")[0] for line in capsys.readouterr().out.splitlines()] == [base, f"{base}-1"]


def test_the_queues_command_refuses_a_bad_shard_count(monkeypatch, capsys):
    from cli import main

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
    assert main(["queues", "--shards", "0"]) == 2
    assert "--shards" in capsys.readouterr().err
