"""Target errors and the literal-address rule of docs/REFERENCE.md section 6."""

import pytest

from config.targets import canonical_host, refusal
from tests.config.helpers import errors, project

KINDS = "http, pubsub, cloud_tasks, noop"


def job(target: str, top: str = "") -> str:
    """A project with one job `a` whose `target:` is on line 5 (without `top`) and
    whose target block, `target` indented below it, starts on line 6."""
    lines = ["# a project with one job", *([top] if top else []), "jobs:", "  - id: a",
             "    schedule: triggered", "    target:"]
    lines += ["      " + line for line in target.strip("\n").splitlines()]
    return "\n".join(lines) + "\n"


CASES = [
    # --- the target map ----------------------------------------------------------------
    ("no target", "jobs:\n  - id: a\n    schedule: triggered\n",
     [f"p.yaml:2: job 'a': target: is required: one of {KINDS}, "
      "e.g. {http: {url: https://example.com/run}}"]),
    ("empty target", job("{}"),
     [f"p.yaml:5: job 'a': target: needs exactly one of {KINDS}; has none"]),
    ("two kinds", job("http: {url: https://x.example.com}\nnoop: {}"),
     [f"p.yaml:5: job 'a': target: needs exactly one of {KINDS}; has http and noop"]),
    ("unknown kind", job("webhook: {url: https://x.example.com}"),
     [f"p.yaml:5: job 'a': target: needs exactly one of {KINDS}; has none",
      f"p.yaml:6: job 'a': unknown field 'target.webhook'; expected one of: {KINDS}"]),
    ("target is a string", "jobs:\n  - id: a\n    schedule: triggered\n    target: https://x\n",
     ["p.yaml:4: job 'a': target: expected a map, e.g. {http: {url: https://example.com/run}}, "
      "got string 'https://x'"]),
    ("noop with fields", job("noop: {fail: true}"),
     ["p.yaml:6: job 'a': target.noop: takes no fields; write noop: {}"]),
    # --- http ----------------------------------------------------------------------------
    # A broken bracketed host is this job's error, not the whole file's (urlsplit raises for it).
    ("unclosed bracket", job("http: {url: 'http://[::1/x'}"),
     ["p.yaml:6: job 'a': target.http.url: 'http://[::1/x' has a bad host: Invalid IPv6 URL"]),
    ("bracketed non-address", job("http: {url: 'http://[zz]/x'}"),
     ["p.yaml:6: job 'a': target.http.url: 'http://[zz]/x' has a bad host: "
      "'zz' does not appear to be an IPv4 or IPv6 address"]),
    ("http without url", job("http: {method: GET}"),
     ["p.yaml:6: job 'a': target.http.url: is required, e.g. https://example.com/run"]),
    ("http is a string", job("http: https://x.example.com"),
     ["p.yaml:6: job 'a': target.http: expected a map, e.g. {url: https://example.com/run}, "
      "got string 'https://x.example.com'"]),
    ("ftp url", job("http: {url: 'ftp://files.example.com/x'}"),
     ["p.yaml:6: job 'a': target.http.url: 'ftp://files.example.com/x' is not an http:// or "
      "https:// URL"]),
    ("url without scheme", job("http: {url: x.example.com/run}"),
     ["p.yaml:6: job 'a': target.http.url: 'x.example.com/run' is not an http:// or "
      "https:// URL"]),
    ("url without host", job("http: {url: 'http:///run'}"),
     ["p.yaml:6: job 'a': target.http.url: 'http:///run' has no host"]),
    ("url with a bad port", job("http: {url: 'http://x.example.com:99999/'}"),
     ["p.yaml:6: job 'a': target.http.url: 'http://x.example.com:99999/' has a bad host "
      "or port"]),
    ("url with a space", job("http: {url: 'http://x.example.com/a b'}"),
     ["p.yaml:6: job 'a': target.http.url: 'http://x.example.com/a b' contains spaces or "
      "control characters"]),
    ("url with an unknown variable", job("http: {url: 'https://x.example.com/${day}'}"),
     ["p.yaml:6: job 'a': target.http.url: unknown variable ${day} at offset 22; known: "
      "attempt, endOfPreviousDay, eventCount, eventIndex, invocationId, jobId, processTime, "
      "project, scheduledTime, serviceHost, startOfDay, startOfDayOneWeekAgo, startOfHour, "
      "startOfPreviousDay, todaysDate, yesterdaysDate; in on_failure and on_recovery also: attempts, failures, "
      "invocationUrl, reason, status"]),
    ("bad method", job("http:\n  url: https://x.example.com\n  method: FETCH"),
     ["p.yaml:8: job 'a': target.http.method: 'FETCH' is not one of GET, POST, PUT, PATCH, "
      "DELETE, HEAD"]),
    ("headers as a list", job("http:\n  url: https://x.example.com\n  headers: [a]"),
     ["p.yaml:8: job 'a': target.http.headers: expected a map, e.g. "
      "{Content-Type: application/json}, got a list"]),
    ("header value is a number", job(
        "http:\n  url: https://x.example.com\n  headers:\n    X-Count: 5"),
     ["p.yaml:9: job 'a': target.http.headers.X-Count: expected a string, got integer 5; "
      "quote it"]),
    ("header value with a line break", job(
        "http:\n  url: https://x.example.com\n  headers: {X-A: \"a\\r\\nInjected: 1\"}"),
     ["p.yaml:8: job 'a': target.http.headers.X-A: must not contain line breaks or NUL "
      "characters"]),
    ("header with a bad name", job(
        "http:\n  url: https://x.example.com\n  headers: {\"Bad Name\": x}"),
     ["p.yaml:8: job 'a': target.http.headers: 'Bad Name' is not a valid HTTP header name"]),
    ("reserved header", job(
        "http:\n  url: https://x.example.com\n  headers: {x-sundial-attempt: '9'}"),
     ["p.yaml:8: job 'a': target.http.headers.x-sundial-attempt: is set by Sundial itself "
      "(X-Sundial-* headers are reserved)"]),
    ("header given twice in different case", job(
        "http:\n  url: https://x.example.com\n  headers:\n    Accept: a\n    accept: b"),
     ["p.yaml:10: job 'a': target.http.headers.accept: given twice (also as 'Accept'); "
      "header names ignore case"]),
    ("header with a bad template", job(
        "http:\n  url: https://x.example.com\n  headers: {X-Day: '${today}'}"),
     ["p.yaml:8: job 'a': target.http.headers.X-Day: unknown variable ${today} at offset 0; "
      "known: attempt, endOfPreviousDay, eventCount, eventIndex, invocationId, jobId, "
      "processTime, project, scheduledTime, serviceHost, startOfDay, startOfDayOneWeekAgo, startOfHour, "
      "startOfPreviousDay, todaysDate, yesterdaysDate; in on_failure and on_recovery also: attempts, failures, "
      "invocationUrl, reason, status"]),
    ("body with an unterminated variable", job(
        "http:\n  url: https://x.example.com\n  body: '{\"t\":\"${startOfHour\"}'"),
     ["p.yaml:8: job 'a': target.http.body: unterminated ${ at offset 6: expected a variable "
      "name and '}'; write $${ for a literal ${"]),
    ("body is a map", job("http:\n  url: https://x.example.com\n  body: {a: 1}"),
     ["p.yaml:8: job 'a': target.http.body: expected a string, got a map"]),
    ("bad http timeout", job("http:\n  url: https://x.example.com\n  timeout: 1 minute"),
     ["p.yaml:8: job 'a': target.http.timeout: bad duration '1 minute': use <number><unit> "
      "with units ms s m h d, e.g. '1h30m'"]),
    ("zero http timeout", job("http:\n  url: https://x.example.com\n  timeout: 0ms"),
     ["p.yaml:8: job 'a': target.http.timeout: must be more than 0s, got 0s"]),
    ("async is not a boolean", job("http:\n  url: https://x.example.com\n  async: sometimes"),
     ["p.yaml:8: job 'a': target.http.async: expected true or false, got string 'sometimes'"]),
    ("unknown http field", job("http:\n  url: https://x.example.com\n  methd: GET"),
     ["p.yaml:8: job 'a': unknown field 'target.http.methd' (did you mean 'method'?)"]),
    # --- pubsub --------------------------------------------------------------------------
    ("pubsub without topic", job("pubsub: {data: x}"),
     ["p.yaml:6: job 'a': target.pubsub.topic: is required, in the form projects/P/topics/T"]),
    ("pubsub with a short topic", job("pubsub: {topic: my-topic}"),
     ["p.yaml:6: job 'a': target.pubsub.topic: 'my-topic' is not of the form "
      "projects/P/topics/T"]),
    ("pubsub data with a bad template", job(
        "pubsub:\n  topic: projects/p/topics/t\n  data: '${yesterday}'"),
     ["p.yaml:8: job 'a': target.pubsub.data: unknown variable ${yesterday} at offset 0; "
      "known: attempt, endOfPreviousDay, eventCount, eventIndex, invocationId, jobId, "
      "processTime, project, scheduledTime, serviceHost, startOfDay, startOfDayOneWeekAgo, startOfHour, "
      "startOfPreviousDay, todaysDate, yesterdaysDate; in on_failure and on_recovery also: attempts, failures, "
      "invocationUrl, reason, status"]),
    ("pubsub reserved attribute", job(
        "pubsub:\n  topic: projects/p/topics/t\n  attributes: {sundial_job: x, googx: y}"),
     ["p.yaml:8: job 'a': target.pubsub.attributes.sundial_job: is reserved (Sundial sets "
      "sundial_* attributes and Pub/Sub reserves goog*)",
      "p.yaml:8: job 'a': target.pubsub.attributes.googx: is reserved (Sundial sets "
      "sundial_* attributes and Pub/Sub reserves goog*)"]),
    ("pubsub attribute that is not a string", job(
        "pubsub:\n  topic: projects/p/topics/t\n  attributes: {n: 1}"),
     ["p.yaml:8: job 'a': target.pubsub.attributes.n: expected a string, got integer 1; "
      "quote it"]),
    # --- cloud_tasks ---------------------------------------------------------------------
    ("cloud_tasks without queue", job("cloud_tasks: {url: https://w.example.com}"),
     ["p.yaml:6: job 'a': target.cloud_tasks.queue: is required, in the form "
      "projects/P/locations/L/queues/Q"]),
    ("cloud_tasks with a bad queue", job(
        "cloud_tasks: {queue: projects/p/queues/q, url: https://w.example.com}"),
     ["p.yaml:6: job 'a': target.cloud_tasks.queue: 'projects/p/queues/q' is not of the "
      "form projects/P/locations/L/queues/Q"]),
    ("cloud_tasks without url", job("cloud_tasks: {queue: projects/p/locations/l/queues/q}"),
     ["p.yaml:6: job 'a': target.cloud_tasks.url: is required, e.g. https://example.com/run"]),
    ("cloud_tasks unknown field", job(
        "cloud_tasks:\n  queue: projects/p/locations/l/queues/q\n  url: https://w.example.com\n"
        "  timeout: 5s"),
     ["p.yaml:9: job 'a': unknown field 'target.cloud_tasks.timeout'; expected one of: "
      "queue, url, method, headers, body, auth"]),
    # --- the literal-address rule --------------------------------------------------------
    ("metadata server", job("http: {url: 'http://metadata.google.internal/computeMetadata/v1/'}"),
     ["p.yaml:6: job 'a': target.http.url: host metadata.google.internal is the metadata "
      "server, refused as a target unless the project's allowed_hosts lists "
      "'metadata.google.internal'"]),
    ("link-local IPv4", job("http: {url: 'http://169.254.169.254/latest'}"),
     ["p.yaml:6: job 'a': target.http.url: host 169.254.169.254 is a link-local address, "
      "refused as a target unless the project's allowed_hosts lists '169.254.169.254'"]),
    ("link-local IPv6", job("http: {url: 'http://[fe80::1]:8080/'}"),
     ["p.yaml:6: job 'a': target.http.url: host fe80::1 is a link-local address, refused as "
      "a target unless the project's allowed_hosts lists 'fe80::1'"]),
    ("link-local in decimal", job("http: {url: 'http://2852039166/'}"),
     ["p.yaml:6: job 'a': target.http.url: host 2852039166 is a link-local address, refused "
      "as a target unless the project's allowed_hosts lists '2852039166'"]),
    ("link-local mapped into IPv6", job("http: {url: 'http://[::ffff:169.254.1.1]/'}"),
     ["p.yaml:6: job 'a': target.http.url: host ::ffff:169.254.1.1 is a link-local address, "
      "refused as a target unless the project's allowed_hosts lists '::ffff:169.254.1.1'"]),
]


@pytest.mark.parametrize("source, expected", [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_target_error(source, expected):
    assert errors(source) == expected


CLOUD_CASES = [
    ("http://127.0.0.1:8080/x", "127.0.0.1 is a loopback address on the cloud backend"),
    ("http://[::1]/x", "::1 is a loopback address on the cloud backend"),
    ("http://10.1.2.3/x", "10.1.2.3 is a private address on the cloud backend"),
    ("http://192.168.0.7/x", "192.168.0.7 is a private address on the cloud backend"),
    ("http://100.64.0.1/x", "100.64.0.1 is a non-public address on the cloud backend"),
    ("http://localhost:8080/x", "localhost is a loopback name on the cloud backend"),
]


@pytest.mark.parametrize("url, problem", CLOUD_CASES)
def test_cloud_backend_refuses_local_addresses(url, problem):
    source = job(f"http: {{url: '{url}'}}")
    host = problem.split(" ")[0]
    assert errors(source, backend="cloud") == [
        f"p.yaml:6: job 'a': target.http.url: host {problem}, refused as a target unless the "
        f"project's allowed_hosts lists '{host}'"]
    assert errors(source, backend="local") == []


@pytest.mark.parametrize("url, host", [
    ("http://169.254.169.254/x", "169.254.169.254"),
    ("http://METADATA.google.internal./x", "metadata.google.internal"),
    ("http://[fe80::1]/x", "[fe80::1]"),
])
def test_allowed_hosts_lifts_the_rule(url, host):
    source = job(f"http: {{url: '{url}'}}", top=f"allowed_hosts: ['{host}']")
    assert errors(source) == []
    assert errors(source, backend="cloud") == []


def test_cloud_backend_allows_private_hosts_listed_in_allowed_hosts():
    source = job("http: {url: 'http://10.0.0.8/x'}", top="allowed_hosts: [10.0.0.8]")
    assert errors(source, backend="cloud") == []


def test_public_and_templated_hosts_pass_on_both_backends():
    for url in ("https://exporter.example.com/run", "http://8.8.8.8/x",
                "https://${project}.example.com/run"):
        source = job(f"http: {{url: '{url}'}}")
        assert errors(source, backend="cloud") == [], url


def test_cloud_tasks_urls_are_not_subject_to_the_rule():
    # Cloud Tasks calls them from Google's network, not from Sundial's.
    source = job("cloud_tasks: {queue: projects/p/locations/l/queues/q, "
                 "url: 'http://10.0.0.1/x'}")
    assert errors(source, backend="cloud") == []


def test_refusal_and_canonical_host():
    assert canonical_host("[FE80::0001]") == "fe80::1"
    assert canonical_host("0xa9fea9fe") == "169.254.169.254"
    assert canonical_host("Example.COM.") == "example.com"
    assert refusal("169.254.43518", (), "local") == "a link-local address"
    assert refusal("cafe.face", (), "cloud") is None
    assert refusal("127.0.0.1", (), "local") is None
    with pytest.raises(ValueError):
        refusal("x", (), "gcp")


def test_target_defaults():
    config = project(job("http: {url: https://x.example.com/run}"))
    assert config.jobs[0].definition.target == {"http": {
        "url": "https://x.example.com/run", "method": "POST", "headers": {}, "body": "",
        "timeout": "1m", "async": False}}
    config = project(job("pubsub: {topic: projects/p/topics/t}"))
    assert config.jobs[0].definition.target == {"pubsub": {
        "topic": "projects/p/topics/t", "data": "", "attributes": {}}}
    config = project(job("cloud_tasks: {queue: projects/p/locations/l/queues/q, "
                         "url: https://w.example.com/x}"))
    assert config.jobs[0].definition.target == {"cloud_tasks": {
        "queue": "projects/p/locations/l/queues/q", "url": "https://w.example.com/x",
        "method": "POST", "headers": {}, "body": ""}}
    assert project(job("noop:")).jobs[0].definition.target == {"noop": {}}


def test_method_is_case_insensitive_and_attempt_timeout_follows_http_timeout():
    config = project(job("http: {url: https://x.example.com, method: get, timeout: 90s}"))
    assert config.jobs[0].definition.target["http"]["method"] == "GET"
    assert config.jobs[0].policy.attempt_timeout.total_seconds() == 90


FRAMING = ["Content-Length", "transfer-encoding", "Connection", "Keep-Alive", "TE", "Trailer",
           "Upgrade", "HOST", "Proxy-Authorization", "Proxy-Anything"]


@pytest.mark.parametrize("name", FRAMING)
@pytest.mark.parametrize("kind", ["http", "cloud_tasks"])
def test_framing_and_hop_by_hop_headers_are_refused(name, kind):
    queue = "queue: projects/p/locations/l/queues/q, " if kind == "cloud_tasks" else ""
    source = job(f"{kind}: {{{queue}url: 'https://x.example.com/', headers: {{'{name}': '0'}}}}")
    assert errors(source) == [
        f"p.yaml:6: job 'a': target.{kind}.headers.{name}: is a framing or hop-by-hop header, "
        "which only the HTTP connection sets (Content-Length, Transfer-Encoding, Connection, "
        "Keep-Alive, TE, Trailer, Upgrade, Host, Proxy-*)"]


@pytest.mark.parametrize("url, problem", [
    ("http://169。254。169。254/x", "is a link-local address"),
    ("http://ｍetadata.google.internal/x", "is the metadata server"),
])
def test_spellings_a_resolver_maps_back_are_refused_at_validation(url, problem):
    errors_found = errors(job(f"http: {{url: '{url}'}}"))
    assert len(errors_found) == 1 and problem in errors_found[0], errors_found


@pytest.mark.parametrize("url, queue, where, problem", [
    ("https://sundial-prod.appspot.com/internal/tasks/trigger", "projects/p/locations/l/queues/q",
     "url", "https://sundial-prod.appspot.com/internal/tasks/trigger is on Sundial's own service "
            "(https://sundial-prod.appspot.com)"),
    ("https://w.example.com/x", "projects/p/locations/l/queues/chain", "queue",
     "queue chain is Sundial's own (its chain queue or a throttle's)"),
    # A shard of the chain's queue (SUNDIAL_TASKS_QUEUE_SHARDS), whatever the count is now.
    ("https://w.example.com/x", "projects/p/locations/l/queues/chain-12", "queue",
     "queue chain-12 is Sundial's own (its chain queue or a throttle's)"),
    ("https://w.example.com/x", "projects/p/locations/l/queues/chain-t-alpha-t-0123abcd", "queue",
     "queue chain-t-alpha-t-0123abcd is Sundial's own (its chain queue or a throttle's)"),
])
def test_a_cloud_tasks_target_may_not_name_sundials_own_service_or_queues(
        monkeypatch, url, queue, where, problem):
    monkeypatch.setenv("SUNDIAL_SERVICE_URL", "https://sundial-prod.appspot.com/")
    monkeypatch.setenv("SUNDIAL_TASKS_QUEUE", "chain")
    source = job(f"cloud_tasks: {{queue: '{queue}', url: '{url}'}}")
    for backend in ("local", "cloud"):
        assert errors(source, backend=backend) == [
            f"p.yaml:6: job 'a': target.cloud_tasks.{where}: {problem}: a task there would pass "
            "for one of Sundial's own"]
    other = job("cloud_tasks: {queue: 'projects/p/locations/l/queues/chained', "
                "url: 'https://sundial-prod.appspot.com.example.com/x'}")
    assert errors(other, backend="cloud") == []


def test_a_cloud_tasks_target_larger_than_cloud_tasks_accepts_is_refused():
    url = "https://w.example.com/run"
    body = "x" * (90 * 1024 - len(url) + 1)
    source = job(f"cloud_tasks:\n  queue: projects/p/locations/l/queues/q\n  url: {url}\n  body: {body}")
    assert errors(source) == [
        "p.yaml:6: job 'a': target.cloud_tasks: the task's url, headers and body together is 92,161 bytes; "
        "the limit is 92,160 bytes (Cloud Tasks refuses a task over 100 KB)"]
    assert errors(job(f"cloud_tasks:\n  queue: projects/p/locations/l/queues/q\n  url: {url}\n"
                      f"  body: {body[:-1]}")) == []


def test_a_broken_urls_error_masks_its_credentials():
    # Errors are shown to readers of the project (API, UI): the key stays out of them.
    found = errors(job("http: {url: 'ftp://user:hunter22@x.example.com/?api_key=abcdef123'}"))
    assert found and all("hunter22" not in line and "abcdef123" not in line for line in found), found
    assert any("<redacted>" in line for line in found), found
