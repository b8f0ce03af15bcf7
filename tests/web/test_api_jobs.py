"""PUT and DELETE of API-managed jobs: creation, idempotent replacement, re-planning,
one-off `at` lists, deletion with pending occurrences."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from config.identities import parse_identities
from statemachine.policy import Tuning
from tests.engine.harness import START
from tests.web.conftest import DEMO, Api, at, error_of, http_job, noop_job


def test_put_creates_201_then_the_same_body_is_200_and_writes_nothing(api):
    body = http_job(schedule="every 1m")
    created = api.put("j", body)
    assert created.status_code == 201
    assert created.headers["Location"].endswith("/api/v1/projects/demo/jobs/j")
    job = created.get_json()
    assert (job["id"], job["project"], job["source"], job["state"]) == ("j", "demo", "api", "SCHEDULED")
    assert job["schedule"] == "every 1m" and job["next_run_time"] == "2026-01-05T10:01:00.000Z"
    counters = api.store.inner.counters  # the in-memory store's (engine/adapters/memory)
    before = (counters["writes"], counters["enqueues"])
    again = api.put("j", body)
    assert again.status_code == 200 and again.get_json() == job
    assert (counters["writes"], counters["enqueues"]) == before  # no job row, no task: nothing can fire twice


def test_the_same_body_twice_fires_each_occurrence_once(api):
    body = noop_job(at=[at(10), at(20)])
    api.put("j", body)
    api.until(5)
    api.put("j", body)
    api.until(60)
    assert [r.scheduled_time for r in api.delivered("j")] == [START + timedelta(seconds=s) for s in (10, 20)]
    assert api.job("j")["state"] == "DONE"


def test_an_at_job_fires_exactly_at_its_times_and_shows_them_in_history(api):
    times = [at(3), at(4), at(5), at(6)]
    api.put("reminders", http_job(at=list(reversed(times))))
    api.until(3.5)
    assert api.job("reminders")["next_run_time"] == "2026-01-05T10:00:04.000Z"
    api.until(30)
    assert [r.scheduled_time for r in api.delivered("reminders")] == [
        START + timedelta(seconds=s) for s in (3, 4, 5, 6)]
    history = api.history("reminders")
    assert [h["scheduled_time"] for h in history] == [t.replace("Z", ".000Z") for t in times]
    assert {h["status"] for h in history} == {"SUCCEEDED"} and {h["trigger"] for h in history} == {"schedule"}
    job = api.job("reminders")
    assert job["state"] == "DONE" and job["next_run_time"] is None
    assert job["last_invocation"]["id"] == history[-1]["id"]


def test_replacing_the_schedule_replans_and_old_ticks_never_fire(api):
    api.put("j", noop_job(schedule="every 1m"))
    api.until(30)
    replaced = api.put("j", noop_job(schedule="*/7 * * * *"))
    assert replaced.status_code == 200
    assert replaced.get_json()["next_run_time"] == "2026-01-05T10:07:00.000Z"
    api.until(15 * 60)
    assert [r.scheduled_time for r in api.delivered("j")] == [
        START + timedelta(minutes=7), START + timedelta(minutes=14)]


def test_replacing_only_the_target_keeps_the_plan(api):
    api.put("j", noop_job(schedule="every 1m"))
    api.until(30)
    api.put("j", http_job(schedule="every 1m"))
    api.until(150)
    assert [r.target for r in api.delivered("j")] == [{"http": {
        "url": "http://127.0.0.1:9/run", "method": "POST", "headers": {}, "body": "", "timeout": "1m",
        "async": False}}] * 2


def test_every_schedule_form_is_accepted(api):
    forms = ["*/5 * * * *", "0 0 12 ? * MON-FRI", "0 0 12 1 1 ? 2030", "@daily", "every 1h offset 15m",
             "with 10m interval", "continuously", "triggered"]
    for index, schedule in enumerate(forms):
        response = api.put(f"job-{index}", noop_job(schedule=schedule, timezone="Europe/Berlin"))
        assert response.status_code == 201, (schedule, response.get_json())
        assert response.get_json()["schedule"] == schedule


def test_a_put_entry_may_repeat_its_own_id_but_not_another(api):
    assert api.put("j", noop_job(id="j", schedule="triggered")).status_code == 201
    response = api.put("k", noop_job(id="j", schedule="triggered"))
    assert error_of(response) == (400, "INVALID_ARGUMENT")
    assert "does not match the job id 'k'" in response.get_json()["error"]["message"]


def test_a_disabled_api_job_is_created_disabled_and_enabled_by_a_later_put(api):
    api.put("j", noop_job(schedule="every 1m", disabled=True))
    assert api.job("j")["state"] == "DISABLED"
    api.until(120)
    assert api.delivered("j") == []
    api.put("j", noop_job(schedule="every 1m"))
    api.until(185)
    assert [r.scheduled_time for r in api.delivered("j")] == [START + timedelta(minutes=3)]


def test_triggers_name_jobs_of_the_project_and_may_not_close_a_cycle(api):
    api.put("a", noop_job(schedule="triggered"))
    api.put("b", noop_job(schedule="triggered", triggers=["a"]))
    unknown = api.put("c", noop_job(schedule="triggered", triggers=["nope"]))
    assert error_of(unknown) == (400, "INVALID_ARGUMENT")
    assert "unknown job 'nope'" in unknown.get_json()["error"]["message"]
    cycle = api.put("a", noop_job(schedule="triggered", triggers=["b"]))
    assert error_of(cycle) == (400, "INVALID_ARGUMENT")
    assert "trigger cycle: a -> b -> a" in cycle.get_json()["error"]["message"]
    assert error_of(api.put("s", noop_job(schedule="triggered", triggers=["s"])))[0] == 400
    api.post("b", ":trigger")
    api.until(5)
    assert [r.job_id for r in api.target.requests] == ["b", "a"]


def test_delete_stops_every_pending_occurrence(api):
    api.put("gone", noop_job(at=[at(10), at(20), at(30)]))
    api.put("stays", noop_job(at=[at(10)]))
    response = api.client.delete(api.url("gone"))
    assert response.status_code == 204 and response.data == b""
    api.until(60)
    assert api.delivered("gone") == []
    assert len(api.delivered("stays")) == 1
    assert error_of(api.client.get(api.url("gone"))) == (404, "NOT_FOUND")
    assert [j["id"] for j in api.get("/api/v1/projects/demo/jobs").get_json()["jobs"]] == ["from-config", "stays"]
    assert api.store.get_job("demo", "gone") is None


def test_delete_aborts_invocations_not_yet_delivered(api):
    api.put("j", noop_job(schedule="every 1m", fanout={"count": 3, "spread": "30s"}))
    api.until(61)  # event 0 delivered; events 1 and 2 are due at 10 and 20 s later
    api.client.delete(api.url("j"))
    api.until(120)
    assert [r.event_index for r in api.delivered("j")] == [0]
    (row,) = api.invocations("j", "demo")
    assert (row.status, row.reason) == ("ABORTED", "deleted")


def test_a_deleted_job_can_be_created_again(api):
    api.put("j", noop_job(schedule="every 1m"))
    api.client.delete(api.url("j"))
    assert api.put("j", noop_job(schedule="every 1m")).status_code == 201
    api.until(61)
    assert len(api.delivered("j")) == 1


def test_delete_answers_404_for_a_missing_job_unless_allowed(api):
    assert error_of(api.client.delete(api.url("nope"))) == (404, "NOT_FOUND")
    assert api.client.delete(api.url("nope") + "?allow_missing=true").status_code == 204
    assert error_of(api.client.delete(api.url("nope") + "?allow_missing=maybe")) == (400, "INVALID_ARGUMENT")


def test_a_config_job_can_be_neither_put_nor_deleted(api):
    put = api.put("from-config", noop_job(schedule="every 5m"))
    assert error_of(put) == (409, "ALREADY_EXISTS")
    assert "config file" in put.get_json()["error"]["message"]
    assert error_of(api.client.delete(api.url("from-config"))) == (409, "FAILED_PRECONDITION")
    assert api.job("from-config")["schedule"] == "every 1m"


def test_a_job_removed_from_the_config_file_may_be_taken_over_by_the_api(api):
    api.write_config("demo", "jobs: []\n")
    assert api.job("from-config")["state"] == "DISABLED"
    taken = api.put("from-config", noop_job(schedule="every 1m"))
    assert taken.status_code == 201 and taken.get_json()["source"] == "api"
    assert taken.get_json()["state"] == "SCHEDULED"


def test_a_broken_entry_of_the_config_file_still_reserves_its_id(api):
    api.write_config("demo", "jobs:\n  - id: broken\n    schedule: nonsense\n    target: {noop: {}}\n")
    assert error_of(api.put("broken", noop_job(schedule="every 1m"))) == (409, "ALREADY_EXISTS")


def test_a_job_whose_entry_breaks_says_so_until_the_entry_is_fixed(api):
    api.write_config("demo", DEMO.replace("every 1m", "every 1 minutes please"))
    [error] = [p for p in api.get("/api/v1/projects").get_json()["projects"] if p["id"] == "demo"][0]["job_errors"]
    job = api.job("from-config")
    assert job["config_error"] == error and "job 'from-config': schedule:" in error
    assert job["schedule"] == "every 1m" and job["state"] == "SCHEDULED"  # its last good definition runs
    listed = api.get("/api/v1/projects/demo/jobs").get_json()["jobs"]
    assert [j["config_error"] for j in listed] == [error]
    schema = api.get("/api/v1/openapi.json").get_json()["components"]["schemas"]["Job"]
    assert "broken" in schema["properties"]["config_error"]["description"]
    api.write_config("demo", DEMO)
    assert api.job("from-config")["config_error"] == ""


def test_api_jobs_are_left_alone_by_config_edits(api):
    api.put("mine", noop_job(schedule="every 1m"))
    api.write_config("demo", "jobs: []\n")
    assert api.job("mine")["state"] == "SCHEDULED" and api.job("mine")["source"] == "api"


def test_the_jobs_list_pages_like_the_invocations(api):
    for index in range(230):
        assert api.put(f"job-{index:03}", {"schedule": "triggered", "target": {"noop": {}}}).status_code == 201
    url = "/api/v1/projects/demo/jobs"
    first = api.get(url).get_json()
    assert len(first["jobs"]) == 100 and first["next_page_token"]
    seen, token = [], None
    while True:
        page = api.get(url + "?page_size=70" + (f"&page_token={token}" if token else "")).get_json()
        seen += [job["id"] for job in page["jobs"]]
        token = page["next_page_token"]
        if not token:
            break
    assert [j for j in seen if j.startswith("job-")] == [f"job-{index:03}" for index in range(230)]
    assert len(seen) == len(set(seen))
    for bad in ("0", "1001", "x", "-1"):
        answer = api.get(f"{url}?page_size={bad}")
        assert answer.status_code == 400 and "page_size" in answer.get_json()["error"]["message"]
    assert len(api.get(url + "?page_size=1000").get_json()["jobs"]) == len(seen)


def test_a_put_job_with_auth_shows_the_auth_and_a_bad_auth_is_refused_naming_the_field(api):
    granted = parse_identities("demo=sa@p.iam.gserviceaccount.com")  # the operator's grant to the project
    api.app.config["SUNDIAL_SETTINGS"] = replace(api.app.config["SUNDIAL_SETTINGS"], identities=granted)
    auth = {"oidc": {"service_account": "sa@p.iam.gserviceaccount.com"}}
    body = {"target": {"http": {"url": "http://127.0.0.1:9/run", "auth": auth}}, "schedule": "every 1m"}
    created = api.put("j", body)
    assert created.status_code == 201, created.get_json()
    assert created.get_json()["target"]["http"]["auth"] == auth
    body["target"]["http"]["headers"] = {"Authorization": "Bearer x"}
    refused = api.put("j", body)
    assert error_of(refused) == (400, "INVALID_ARGUMENT")
    assert "target.http.auth: sets Authorization, and so does headers.Authorization" in str(refused.get_json())


def test_config_errors_name_the_file_but_not_where_the_server_keeps_it(api):
    """Readers of a project see its errors; the server's directories are not theirs to know."""
    def shown() -> str:
        [project] = [p for p in api.get("/api/v1/projects").get_json()["projects"] if p["id"] == "demo"]
        return " ".join([project["config_error"] or "", *project["job_errors"], api.job("from-config")["config_error"]])

    api.write_config("demo", DEMO.replace("every 1m", "every 1 minutes please"))
    broken_entry = shown()
    api.write_config("demo", DEMO + "oops: [\n")
    for errors in (broken_entry, shown()):
        assert "demo.yaml" in errors
        assert str(api.configs) not in errors and str(api.configs.parent) not in errors


def test_a_one_off_job_staged_ahead_is_scheduled_at_its_time_until_it_comes(tmp_path):
    """Its only time is T: committed 10 s ahead, it shows as due at T (not RUNNING with no
    next run), its invocation STARTING with no start time, its series due at T."""
    api = Api(tmp_path, Tuning(stage_ahead=timedelta(seconds=10)))
    api.put("once", noop_job(at=[at(30)]))
    seen = {}

    def half_a_second_before():
        api.clock.current = START + timedelta(seconds=29.5)
        seen["job"] = api.job("once")
        seen["listed"] = {job["id"]: job for job in api.get("/api/v1/projects/demo/jobs").get_json()["jobs"]}
        seen["history"] = api.history("once")
        seen["metrics"] = api.get("/metrics").get_data(as_text=True)
    api.clock.while_sleeping = half_a_second_before
    api.until(31)
    assert api.store.get_job("demo", "once").record.tick_at is None  # (the staging did happen, and ended)
    job = seen["job"]
    assert (job["state"], job["next_run_time"]) == ("SCHEDULED", "2026-01-05T10:00:30.000Z")
    assert seen["listed"]["once"] == job
    (invocation,) = seen["history"]
    assert (invocation["status"], invocation["started_time"]) == ("STARTING", None)
    assert job["last_invocation"] == invocation and job["active_invocations"] == [invocation["id"]]
    series = 'sundial_job_next_run_timestamp_seconds{project="demo",job="once"} '
    assert f"{series}{int((START + timedelta(seconds=30)).timestamp())}" in seen["metrics"].splitlines()
    job = api.job("once")  # at T + 1 s: sent and finished
    assert (job["state"], job["next_run_time"]) == ("DONE", None)
    assert [(row["status"], row["started_time"]) for row in api.history("once")] == [
        ("SUCCEEDED", "2026-01-05T10:00:30.000Z")]


def test_a_put_reads_the_project_and_the_job_once_before_its_transaction(api, monkeypatch):
    reads: list[str] = []
    store = api.engine.queries.store
    for name in ("get_project", "get_job"):
        real = getattr(store, name)
        monkeypatch.setattr(store, name, lambda *args, _real=real, _name=name: reads.append(_name) or _real(*args))
    assert api.put("j", noop_job(schedule="every 1m")).status_code == 201
    assert sorted(reads) == ["get_job", "get_project"]  # the answer's view reuses the job just saved
    reads.clear()
    assert api.put("j", noop_job(schedule="every 2m")).status_code == 200
    assert sorted(reads) == ["get_job", "get_project"]


def test_the_same_body_again_opens_no_transaction_and_a_changed_one_does(api):
    body = http_job(schedule="every 1m")
    api.put("j", body)
    counters = api.store.inner.counters  # the in-memory store's (engine/adapters/memory)
    commits = counters["commits"]
    assert api.put("j", body).status_code == 200
    assert api.client.post("/api/v1/projects/demo/jobs:batchPut", json={"jobs": [{"id": "j", "job": body}]}
                           ).get_json()["results"] == [{"id": "j", "status": 200}]
    assert counters["commits"] == commits  # nothing to write: not even the write lock taken
    api.post("j", ":pause")
    commits = counters["commits"]
    assert api.put("j", body).status_code == 200 and api.job("j")["paused"]  # a PUT does not resume
    assert counters["commits"] == commits
    assert api.put("j", http_job(schedule="every 2m")).status_code == 200
    assert counters["commits"] == commits + 1
