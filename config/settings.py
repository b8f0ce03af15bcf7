"""Settings from the environment, overridable by flags.

The table below is the one list of the variables Sundial reads (docs/REFERENCE.md,
section 8, explains each; tests/config/test_reference.py checks both lists are complete).
Each has a default that suits one machine:

| variable | default | meaning |
|---|---|---|
| SUNDIAL_CONFIG_DIR | examples/configs | project config files |
| SUNDIAL_DB | .sundial/sundial.db | the SQLite database |
| SUNDIAL_PORT | 8080 | the port serve listens on (--port) |
| SUNDIAL_BACKEND | local | local or cloud |
| SUNDIAL_API_TOKENS | | `token=user:EMAIL,...`: the bearer tokens callers may present and who each stands for; unset, serve listens on loopback only |
| SUNDIAL_LOG_LEVEL | INFO | the lowest severity of Sundial's log lines: DEBUG, INFO, WARNING or ERROR (the libraries' lines: never below INFO) |
| SUNDIAL_HISTORY_DAYS | 45 | invocation history kept, in days (at least 1) |
| SUNDIAL_WATCHDOG_PERIOD | 30s | how often serve runs the watchdog |
| SUNDIAL_IMPORT_PERIOD | 5s | how often serve re-reads the configs |
| SUNDIAL_CLEANUP_PERIOD | 1h | how often serve removes old history |
| SUNDIAL_MAINTENANCE_BUDGET | 40s | how long one run of the watchdog or the clean-up may work (cron or serve's loops); what is left goes to the next run |
| SUNDIAL_WATCHDOG_WORKERS | 8 on the cloud backend, 1 on the embedded one | watchdog repairs run at once |
| SUNDIAL_WORKERS | 32 | task threads of the embedded dispatcher |
| SUNDIAL_PROCESSES | 1 | serve's processes on the embedded backend: N - 1 extra dispatcher-only processes (`serve --processes`); with staging a burst goes as fast in one, and a steady load costs less CPU and memory there |
| SUNDIAL_TASK_LEASE | 30s | how long a taken task is its taker's |
| SUNDIAL_HEARTBEAT_PERIOD | 5s | embedded backend: how often each process says it is alive (and settles the attempts of processes that are gone) |
| SUNDIAL_STOP_GRACE | 8s | how long serve may take to stop after SIGTERM or Ctrl-C: nothing new is sent after the signal, requests on the wire get until a second before the end to answer, then are left to the next start (sent again under their invocation ids); fit it inside the platform's kill timeout (docker stop: 10 s, terminationGracePeriodSeconds: 30 s) |
| SUNDIAL_HEARTBEAT_TIMEOUT | 4 heartbeat periods | embedded backend: a process whose heartbeat is older is gone, and its attempts in flight are settled (a dead pid on this machine is gone at once) |
| SUNDIAL_TICK_GRACE, SUNDIAL_START_GRACE, SUNDIAL_LATE_TOLERANCE | 30s, 60s, 60s | the chain's timings (statemachine.policy.Tuning) |
| SUNDIAL_STAGE_AHEAD | 10s | embedded backend: how long before its time an occurrence is committed and its request held (0s: off; at most 60s) |
| SUNDIAL_RECORD_VERSION | 2 | the job record layout written while a fan-out runs: 2 (its events in rows of their own), or 1, which the release before reads: set 1 to prepare a rollback (docs/DEPLOY.md) |
| SUNDIAL_TASK_SECRET | generated, kept in the database | the secret on every task |
| SUNDIAL_SECRETS_DIR | | one machine: secrets of header values, one folder per project (`<dir>/<project>/<NAME>`) |
| GOOGLE_CLOUD_PROJECT | | cloud backend: the project of Datastore and Cloud Tasks |
| SUNDIAL_TASKS_LOCATION, SUNDIAL_TASKS_QUEUE | us-central1, sundial | cloud backend: the chain's queue |
| SUNDIAL_TASKS_QUEUE_SHARDS | 1 | cloud backend: the chain's queues (N): a job's tasks go to `QUEUE` or `QUEUE-1` .. `QUEUE-(N-1)` by a hash of its name; each dispatches 500 tasks/s (docs/SCALE.md) |
| SUNDIAL_SERVICE_URL | http://HOST:PORT, or https://PROJECT.appspot.com on App Engine | where Cloud Tasks calls back |
| SUNDIAL_TASKS_EMULATOR_HOST | | host:port of a Cloud Tasks emulator (no TLS) |
| SUNDIAL_TASKS_SERVICE_ACCOUNT | | the account whose OIDC tokens the cron handlers accept, and (HTTP tasks) the account of the token on every task |
| SUNDIAL_IDENTITIES | | `PROJECT=SA,SA;PROJECT=...`: the service accounts each project's `auth` may name (none when unset) |
| SUNDIAL_IDENTITY_AUDIENCES | | `PROJECT=URL,URL;...`: OIDC audiences a project's `auth` may name besides its target URL's origin |
| SUNDIAL_OWN_HOSTS | | more host names of Sundial's own service (custom domains, a load balancer's name): no `cloud_tasks` url or `auth` audience may name them |
| K_SERVICE | set by Cloud Run | the service's name: both of Cloud Run's host names of it are Sundial's own |
| SUNDIAL_TASKS_TARGET | appengine on App Engine, else http | the form of the chain's tasks: `appengine` (App Engine tasks to this app's service, inside Google: IAP and the App Engine firewall do not stop them) or `http` (HTTP tasks to SUNDIAL_SERVICE_URL) |
| GAE_APPLICATION | set by App Engine | its presence means Sundial runs on App Engine |
| GAE_SERVICE | set by App Engine | App Engine tasks are routed to this service (the serving version) |
| SUNDIAL_FAULT_DUPLICATE_TASKS | 0 | fault injection: create every Cloud Tasks task twice |
| SUNDIAL_ADMINS | | members (`user:EMAIL`, ...) who own every project, comma-separated |
| SUNDIAL_GROUPS_FILE | | a YAML file of `{group: [members]}` for ACLs |
| SUNDIAL_IAP_AUDIENCE | | behind Identity-Aware Proxy: the audience of its assertions |
| SUNDIAL_ID_TOKEN_AUDIENCE | the service URL on App Engine | the audience of Google ID tokens accepted as callers |
| SUNDIAL_IAP_CERTS_URL, SUNDIAL_ID_CERTS_URL | IAP's and Google's | where their signing keys are fetched (tests point them at a stand-in) |
| SUNDIAL_SECRETS | | `local`: read secrets from SUNDIAL_SECRETS_DIR on the cloud backend too |
| SUNDIAL_SECRET_MANAGER_URL | https://secretmanager.googleapis.com | Secret Manager's API (tests point it at a stand-in) |
| PUBSUB_EMULATOR_HOST, DATASTORE_EMULATOR_HOST | | Google's own variables for their emulators; Sundial reads them to decide what is available |
| GOOGLE_APPLICATION_CREDENTIALS, CLOUDSDK_CONFIG, HOME | | where Application Default Credentials are looked for (pubsub and cloud_tasks targets on one machine; `auth` tokens off Google Cloud) |
| GCE_METADATA_HOST | metadata.google.internal | host[:port] of the metadata server that `auth` targets mint tokens through (google-auth's own variable; tests point it at a stand-in) |
| SUNDIAL_IAM_CREDENTIALS_URL | https://iamcredentials.googleapis.com | the IAM Credentials API that mints `auth` tokens for other service accounts (tests or a private endpoint) |
| SUNDIAL_SERVER | http://127.0.0.1:8080 | the operator's commands (`jobs`, `invocations`): the server they talk to, when --server is not given |
| SUNDIAL_TOKEN | | the operator's commands: their bearer token (one of the server's SUNDIAL_API_TOKENS), when neither --token-file nor --token is given |
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Mapping, TypedDict

from config.identities import parse_identities, parse_own_hosts
from statemachine.durations import parse_duration
from statemachine.identities import IdentityGrants, IdentityRules
from statemachine.policy import Tuning
from statemachine.safety import OwnService
from statemachine.shards import MAX_SHARDS


@dataclass(frozen=True)
class Heartbeat:
    """Embedded backend: how often each process says it is alive, and how old its last
    word may be before the process counts as gone (engine/adapters/local/liveness.py)."""

    period: timedelta = timedelta(seconds=5)
    timeout: timedelta = timedelta(seconds=20)


# One process, whatever the cores. Occurrences due at one instant are committed ahead of
# it (staging), so at the instant one process only writes requests, and a burst of 10,000
# went at the same rate with two (about 13,900/s either way); a second process cost
# 30-40% more CPU per delivery in a steady load (both look at the queue, and the commits
# go through the cross-process write lock) and about 90 MiB. `--processes N` asks for more
# (docs/PERFORMANCE.md, "The default process count").
DEFAULT_PROCESSES = 1


@dataclass(frozen=True)
class Settings:
    config_dir: str = "examples/configs"
    db_path: str = ".sundial/sundial.db"
    backend: str = "local"
    host: str = "127.0.0.1"
    port: int = 8080
    history: timedelta = timedelta(days=45)
    watchdog_period: timedelta = timedelta(seconds=30)
    import_period: timedelta = timedelta(seconds=5)
    cleanup_period: timedelta = timedelta(hours=1)
    # One run of the watchdog or the clean-up: App Engine's cron calls each every minute.
    maintenance_budget: timedelta = timedelta(seconds=40)
    watchdog_workers: int = 0  # 0: by backend (8 on Datastore, whose repairs wait on RPCs; 1 on SQLite)
    workers: int = 32
    processes: int = DEFAULT_PROCESSES
    task_lease: timedelta = timedelta(seconds=30)
    heartbeat: Heartbeat = field(default_factory=Heartbeat)
    # From the stop signal to the exit of serve (and of its children): inside Docker's and
    # Cloud Run's 10 s before they kill a container, with room for the last commits.
    stop_grace: timedelta = timedelta(seconds=8)
    tuning: Tuning = field(default_factory=Tuning)
    task_secret: str = ""
    api_tokens: str = ""
    log_level: str = "INFO"  # one of LOG_LEVELS
    on_app_engine: bool = False
    demo_echo: bool = True
    gcp_project: str = ""
    tasks_location: str = "us-central1"
    tasks_queue: str = "sundial"
    tasks_queue_shards: int = 1
    tasks_emulator_host: str = ""
    tasks_service_account: str = ""
    tasks_target: str = ""  # "appengine" or "http"; "" chooses by where Sundial runs
    app_engine_service: str = ""  # GAE_SERVICE: where App Engine tasks are routed
    explicit_service_url: str = ""
    fault_duplicate_tasks: bool = False
    admins: str = ""  # members who own every project, comma-separated
    groups_file: str = ""  # YAML {group: [members]}
    iap_audience: str = ""
    id_token_audience: str = ""
    iap_certs_url: str = ""  # "" is IAP's own
    id_certs_url: str = ""  # "" is Google's own
    secrets_dir: str = ""
    secrets_source: str = ""  # "local": SUNDIAL_SECRETS_DIR on the cloud backend too
    secret_manager_url: str = "https://secretmanager.googleapis.com"
    pubsub_emulator_host: str = ""
    datastore_emulator_host: str = ""
    google_credentials: bool = False  # Application Default Credentials set up on this machine
    credentials_file: str = ""  # that file, for minting `auth` tokens off Google Cloud
    metadata_host: str = "metadata.google.internal"  # `auth` targets: the metadata server
    iam_credentials_url: str = "https://iamcredentials.googleapis.com"  # `auth` targets: impersonation
    identities: IdentityGrants = field(default_factory=IdentityGrants)  # what each project's `auth` may name
    own_hosts: frozenset[str] = frozenset()  # more host names of Sundial's own service
    cloud_run_service: str = ""  # K_SERVICE

    @property
    def app_engine_tasks(self) -> bool:
        """Whether the chain's tasks are App Engine tasks (else HTTP tasks)."""
        return self.tasks_target == "appengine" or (not self.tasks_target and self.on_app_engine)

    @property
    def service_url(self) -> str:
        if self.explicit_service_url:
            return self.explicit_service_url.rstrip("/")
        if self.on_app_engine and self.gcp_project:
            return f"https://{self.gcp_project}.appspot.com"
        return f"http://{self.host}:{self.port}"

    @property
    def own_service(self) -> OwnService:
        """Sundial's own service as these settings run it: its names, its queues, and what
        it lends each project of its Google identities (statemachine/identities.py)."""
        rules = IdentityRules(self.identities, frozenset({self.id_token_audience} - {""}),
                              {self.tasks_service_account.lower(): "the account of Sundial's task queue "
                               "(SUNDIAL_TASKS_SERVICE_ACCOUNT)"} if self.tasks_service_account else {})
        return OwnService(self.service_url, self.tasks_queue, self.own_hosts, self.cloud_run_service,
                          self.gcp_project if self.on_app_engine else "", rules)


def _duration(env: Mapping[str, str], name: str, default: timedelta) -> timedelta:
    raw = env.get(name)
    if not raw:
        return default
    try:
        return parse_duration(raw)
    except ValueError as error:
        raise SystemExit(f"{name}: {error}") from None


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """One of `choices`, or "" when the variable is not set."""
    raw = env.get(name, "")
    if raw and raw not in choices:
        raise SystemExit(f"{name}: expected one of {', '.join(choices)}, got {raw!r}")
    return raw


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _log_level(env: Mapping[str, str]) -> str:
    """SUNDIAL_LOG_LEVEL in any case (`debug` is DEBUG); a value that names no level stops
    the start, rather than logging at a level nobody asked for."""
    raw = env.get("SUNDIAL_LOG_LEVEL", "").strip()
    if raw and raw.upper() not in LOG_LEVELS:
        raise SystemExit(f"SUNDIAL_LOG_LEVEL: expected one of {', '.join(LOG_LEVELS)}, got {raw!r}")
    return raw.upper() or Settings.log_level


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if not raw:
        return default
    if not raw.isdigit():
        raise SystemExit(f"{name}: expected a whole number, got {raw!r}")
    return int(raw)


def _port(env: Mapping[str, str]) -> int:
    port = _int(env, "SUNDIAL_PORT", Settings.port)
    if not 1 <= port <= 65535:
        raise SystemExit(f"SUNDIAL_PORT: expected a port from 1 to 65535, got {port}")
    return port


def _history(env: Mapping[str, str]) -> timedelta:
    """How long finished invocations are kept: at least a day, because a finish may live
    in its invocation's row alone until the job's next step (engine/deferred_finish.py)."""
    days = _int(env, "SUNDIAL_HISTORY_DAYS", 45)
    if days < 1:
        raise SystemExit(f"SUNDIAL_HISTORY_DAYS: at least 1 (day), got {days}")
    return timedelta(days=days)


def from_environment(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    defaults = Settings()
    backend = env.get("SUNDIAL_BACKEND", "local")
    if backend not in ("local", "cloud"):
        raise SystemExit(f"SUNDIAL_BACKEND: expected 'local' or 'cloud', got {backend!r}")
    return Settings(
        config_dir=env.get("SUNDIAL_CONFIG_DIR", defaults.config_dir),
        db_path=env.get("SUNDIAL_DB", defaults.db_path),
        port=_port(env),
        backend=backend,
        history=_history(env),
        watchdog_period=_duration(env, "SUNDIAL_WATCHDOG_PERIOD", defaults.watchdog_period),
        import_period=_duration(env, "SUNDIAL_IMPORT_PERIOD", defaults.import_period),
        cleanup_period=_duration(env, "SUNDIAL_CLEANUP_PERIOD", defaults.cleanup_period),
        maintenance_budget=_duration(env, "SUNDIAL_MAINTENANCE_BUDGET", defaults.maintenance_budget),
        watchdog_workers=_int(env, "SUNDIAL_WATCHDOG_WORKERS", defaults.watchdog_workers),
        workers=_int(env, "SUNDIAL_WORKERS", defaults.workers),
        processes=max(1, _int(env, "SUNDIAL_PROCESSES", defaults.processes)),
        task_lease=_duration(env, "SUNDIAL_TASK_LEASE", defaults.task_lease),
        heartbeat=_heartbeat(env, defaults.heartbeat.period),
        stop_grace=_duration(env, "SUNDIAL_STOP_GRACE", defaults.stop_grace),
        tuning=_tuning(env, defaults.tuning, backend),
        task_secret=env.get("SUNDIAL_TASK_SECRET", ""),
        api_tokens=env.get("SUNDIAL_API_TOKENS", ""),
        log_level=_log_level(env),
        on_app_engine=bool(env.get("GAE_APPLICATION")),
        # The demo's echo endpoint exists only where a newcomer runs the examples.
        demo_echo=backend == "local",
        gcp_project=env.get("GOOGLE_CLOUD_PROJECT", ""),
        **_cloud_tasks(env, defaults),
        explicit_service_url=env.get("SUNDIAL_SERVICE_URL", ""),
        fault_duplicate_tasks=env.get("SUNDIAL_FAULT_DUPLICATE_TASKS", "0") == "1",
        admins=env.get("SUNDIAL_ADMINS", ""),
        groups_file=env.get("SUNDIAL_GROUPS_FILE", ""),
        iap_audience=env.get("SUNDIAL_IAP_AUDIENCE", ""),
        id_token_audience=env.get("SUNDIAL_ID_TOKEN_AUDIENCE", ""),
        iap_certs_url=env.get("SUNDIAL_IAP_CERTS_URL", ""),
        id_certs_url=env.get("SUNDIAL_ID_CERTS_URL", ""),
        secrets_dir=env.get("SUNDIAL_SECRETS_DIR", ""),
        secrets_source=env.get("SUNDIAL_SECRETS", ""),
        secret_manager_url=env.get("SUNDIAL_SECRET_MANAGER_URL", defaults.secret_manager_url),
        pubsub_emulator_host=env.get("PUBSUB_EMULATOR_HOST", ""),
        datastore_emulator_host=env.get("DATASTORE_EMULATOR_HOST", ""),
        google_credentials=bool(_credentials_file(env)),
        credentials_file=_credentials_file(env),
        metadata_host=env.get("GCE_METADATA_HOST", "") or defaults.metadata_host,
        iam_credentials_url=env.get("SUNDIAL_IAM_CREDENTIALS_URL", "") or defaults.iam_credentials_url,
        **_identities(env),
    )


class _Identities(TypedDict):
    identities: IdentityGrants
    own_hosts: frozenset[str]
    cloud_run_service: str


def _identities(env: Mapping[str, str]) -> _Identities:
    """The operator's grant of identities to projects, and the names of Sundial's own
    service beyond its URL (config/identities.py); a mistake stops the start."""
    try:
        return {
            "identities": parse_identities(env.get("SUNDIAL_IDENTITIES", ""), env.get("SUNDIAL_IDENTITY_AUDIENCES", "")),
            "own_hosts": parse_own_hosts(env.get("SUNDIAL_OWN_HOSTS", "")),
            "cloud_run_service": env.get("K_SERVICE", ""),
        }
    except ValueError as error:
        raise SystemExit(str(error)) from None


class _CloudTasks(TypedDict):
    tasks_location: str
    tasks_queue: str
    tasks_queue_shards: int
    tasks_emulator_host: str
    tasks_service_account: str
    tasks_target: str
    app_engine_service: str


def _cloud_tasks(env: Mapping[str, str], defaults: Settings) -> _CloudTasks:
    """The cloud backend's chain queue, and the form and target of its tasks."""
    return {
        "tasks_location": env.get("SUNDIAL_TASKS_LOCATION", defaults.tasks_location),
        "tasks_queue": env.get("SUNDIAL_TASKS_QUEUE", defaults.tasks_queue),
        "tasks_queue_shards": queue_shards(env),
        "tasks_emulator_host": env.get("SUNDIAL_TASKS_EMULATOR_HOST", ""),
        "tasks_service_account": env.get("SUNDIAL_TASKS_SERVICE_ACCOUNT", ""),
        "tasks_target": _choice(env, "SUNDIAL_TASKS_TARGET", ("appengine", "http")),
        "app_engine_service": env.get("GAE_SERVICE", ""),
    }


def queue_shards(env: Mapping[str, str]) -> int:
    """SUNDIAL_TASKS_QUEUE_SHARDS: how many queues carry the chain (1 .. MAX_SHARDS)."""
    shards = _int(env, "SUNDIAL_TASKS_QUEUE_SHARDS", 1)
    if not 1 <= shards <= MAX_SHARDS:
        raise SystemExit(f"SUNDIAL_TASKS_QUEUE_SHARDS: expected 1 to {MAX_SHARDS} queues, got {shards}")
    return shards


def _tuning(env: Mapping[str, str], default: Tuning, backend: str = "local") -> Tuning:
    tuning = replace(
        default, fanout_rows=_choice(env, "SUNDIAL_RECORD_VERSION", ("1", "2")) != "1",
        tick_grace=_duration(env, "SUNDIAL_TICK_GRACE", default.tick_grace),
        start_grace=_duration(env, "SUNDIAL_START_GRACE", default.start_grace),
        late_tolerance=_duration(env, "SUNDIAL_LATE_TOLERANCE", default.late_tolerance),
    )
    if backend == "cloud":  # Cloud Tasks runs each tick at its time: nothing is staged there
        return tuning
    stage_ahead = _duration(env, "SUNDIAL_STAGE_AHEAD", STAGE_AHEAD)
    if not timedelta(0) <= stage_ahead <= MAX_STAGE_AHEAD:
        raise SystemExit(f"SUNDIAL_STAGE_AHEAD: must be between 0s and {MAX_STAGE_AHEAD.seconds}s")
    return replace(tuning, stage_ahead=stage_ahead)


# How long before its time the embedded backend stages an occurrence (statemachine/staging.py):
# long enough to commit a thousand occurrences due at one instant on two cores, short enough
# that a job every second or two is seldom still running. A process that dies with a staged
# request not yet let out leaves it to be sent under its invocation id by whoever settles it
# (engine/adapters/local/release_marks.py), as an occurrence not yet staged would be.
# Ten seconds: a burst of 10,000 occurrences due at one instant is committed ahead in
# about three on two cores, and then leaves at its time at the writer's pace.
STAGE_AHEAD = timedelta(seconds=10)
MAX_STAGE_AHEAD = timedelta(seconds=60)


def _heartbeat(env: Mapping[str, str], default: timedelta) -> Heartbeat:
    """The heartbeat's period, and its timeout (by default 4 periods)."""
    period = _duration(env, "SUNDIAL_HEARTBEAT_PERIOD", default)
    timeout = _duration(env, "SUNDIAL_HEARTBEAT_TIMEOUT", 4 * period)
    if period <= timedelta(0) or timeout <= period:
        raise SystemExit("SUNDIAL_HEARTBEAT_TIMEOUT must be longer than SUNDIAL_HEARTBEAT_PERIOD (> 0)")
    return Heartbeat(period, timeout)


def _credentials_file(env: Mapping[str, str]) -> str:
    """The Application Default Credentials file of this machine, or "". Only the two
    places a developer puts them are looked at: asking the metadata server would stall
    every start of an embedded server that runs off Google Cloud."""
    if env.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return env["GOOGLE_APPLICATION_CREDENTIALS"]
    home = env.get("HOME")  # not "~": a container's user may have no passwd entry, and Path.home() raises
    config = env.get("CLOUDSDK_CONFIG") or (str(Path(home) / ".config" / "gcloud") if home else "")
    if not config:
        return ""
    found = Path(config) / "application_default_credentials.json"
    return str(found) if found.is_file() else ""


def own_service(env: Mapping[str, str] | None = None) -> OwnService:
    """Sundial's own service (its URL, names and chain queue) and the grant of identities
    as the environment names them, for validation (docs/REFERENCE.md section 6: no
    cloud_tasks target may name the service; `auth` names only granted accounts).
    `serve --port` changes the URL it really listens on; delivery checks against that one."""
    env = os.environ if env is None else env
    settings = Settings(gcp_project=env.get("GOOGLE_CLOUD_PROJECT", ""),
                        on_app_engine=bool(env.get("GAE_APPLICATION")),
                        explicit_service_url=env.get("SUNDIAL_SERVICE_URL", ""),
                        tasks_queue=env.get("SUNDIAL_TASKS_QUEUE", Settings.tasks_queue),
                        tasks_service_account=env.get("SUNDIAL_TASKS_SERVICE_ACCOUNT", ""),
                        id_token_audience=env.get("SUNDIAL_ID_TOKEN_AUDIENCE", ""), **_identities(env))
    return settings.own_service


def variable(name: str, env: Mapping[str, str] | None = None) -> str:
    """One variable of the table above, for a command that needs it alone (`validate`,
    `queues`) and reports a bad value in its own words; "" when it is not set."""
    env = os.environ if env is None else env
    return env.get(name, "")
