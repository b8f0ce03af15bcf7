"""How much one step may write: what keeps every transaction within one commit.

Each step of a job is one transaction, and legacy Datastore takes at most
COMMIT_ENTITY_LIMIT entities in one commit (puts and deletes together); Firestore in
Datastore mode and the emulators take more, so the store enforces the limit itself
(the Datastore adapter refuses a larger commit before anything is written, and the
SQLite store refuses the same, so that the embedded backend's tests see it too).

A step writes the job's own entities (its record, the invocations it starts or
ends, a note, a notification) and, wherever the number of rows depends on the data
rather than on the job's definition, at most ROWS_PER_STEP of those rows:
- SKIPPED rows of the fire times a tick lists as missed or paused (Tuning.scan_limit);
- SKIPPED rows of occurrences that stop waiting (a pause, a disable, buffer_one,
  statemachine/waiting.py), and of a backlog settled when a job's timing changes;
- fan-out event rows settled by one completion report (statemachine/fanout_step.py).
What is left over is carried to the following steps (a tick armed for now, or the
caller stepping again), never dropped and never written twice. The margin between the
two numbers is the job's own entities.
"""

from __future__ import annotations

COMMIT_ENTITY_LIMIT = 500  # entities one commit may write on legacy Datastore
ROWS_PER_STEP = 400  # rows one step writes in a batch of any data-sized kind
# Waiting occurrences (a backfill's, a caught-up run's) started by one step: under `allow`
# with a large `max_concurrent` they could otherwise be more than one commit takes. The rest
# start as invocations end, a batch at each end, so nothing stalls while any is active.
STARTS_PER_STEP = ROWS_PER_STEP // 4
# Jobs a bulk writer (the config import) steps in one transaction where the store takes
# several (SqliteJobStore.jobs_per_commit): a new job writes one entity, so a batch fits
# one commit; a batch whose steps write more is split by the writer, not refused.
JOBS_PER_COMMIT = 200
