"""A whole project document -> ProjectConfig (docs/REFERENCE.md section 2 and its import rules).

Two kinds of error, as the import rules need:
- file level: the top level is not a map, or a top-level field (allowed_hosts, acl,
  defaults, throttles, calendars, jobs) is unknown or wrong. The whole project changes nothing:
  ProjectConfigError, carrying every error found, job errors included, by line.
- job level: one entry is wrong, or duplicates another entry's id (then no entry with
  that id is loaded: there is no telling which one was meant), or closes a cycle of
  triggers. The entry is skipped with its errors; the other jobs load.

An empty file is a valid project without jobs (it holds no ACL, so only owners see it).
Triggers are checked against every id the file lists, loaded or not, so that one broken
entry does not make the jobs that trigger it fail too. A cycle is broken by skipping the
job whose `triggers` entry closes it, in file order: `a -> b -> a` skips b.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from config.calendars import parse_calendars
from config.checks import Checker, describe_value
from config.fanin import after_edges, with_reports
from config.jobs import JobContext, defaults_json, entry_id, parse_defaults, parse_entry, trigger_name
from config.model import JOB_ID, PROJECT_ID, ConfigError, JobConfig, ProjectConfig, ProjectConfigError
from config.targets import TargetRules
from config.yamlsource import LineMap, Path
from statemachine.safety import OwnService

__all__ = ["ACL_ROLES", "TOP_FIELDS", "trigger_cycle", "validate_project"]

TOP_FIELDS = ("allowed_hosts", "acl", "defaults", "throttles", "calendars", "jobs")
ACL_ROLES = ("readers", "triggerers", "owners")
_MEMBER = re.compile(r"(user|serviceAccount):[^@\s]+@[^@\s]+|group:\S+|anonymous")
_NOT_A_HOST = re.compile(r"[\s/@?#]")


def validate_project(project: str | None, document: Any, lines: LineMap, filename: str,
                     path: str, content_hash: str, backend: str,
                     own: OwnService | None = None) -> ProjectConfig:
    """Check a parsed document; `project` None skips the project id check."""
    top = Checker(filename, lines)
    if project is not None and not PROJECT_ID.fullmatch(project):
        top.errors.append(ConfigError(filename, 1, (
            f"project id '{project}' (the file name without .yaml) must be 1 to 63 "
            "lower-case letters, digits or '-', starting with a letter or digit")))
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise ProjectConfigError(top.errors + [ConfigError(filename, lines.line(()), (
            "the top level must be a map of project fields (allowed_hosts, acl, defaults, "
            f"throttles, calendars, jobs), got {describe_value(document)}"))])
    top.known_fields((), document, TOP_FIELDS)
    allowed_hosts = top.attempt(lambda: _allowed_hosts(top, document.get("allowed_hosts")), ())
    acl = top.attempt(lambda: _acl(top, document.get("acl")), _empty_acl())
    throttles = top.attempt(lambda: _throttles(top, document.get("throttles")))
    calendars = top.attempt(lambda: parse_calendars(top, document.get("calendars")), {})
    defaults = top.attempt(lambda: parse_defaults(top, ("defaults",), document.get("defaults")),
                           {})
    entries = top.attempt(lambda: _entries(top, document.get("jobs")), [])
    known = _ids(entries)
    context = JobContext(defaults, TargetRules.of(allowed_hosts, backend, own, project),
                         throttles=None if throttles is None else set(throttles),
                         known_jobs=set(known), calendars=calendars)
    _check_default_references(top, context)
    jobs, job_errors = _jobs(filename, lines, entries, context)
    if top.errors:
        raise ProjectConfigError(_by_line(top.errors + job_errors))
    return ProjectConfig(
        project=project or "", path=path, jobs=tuple(jobs), job_errors=tuple(job_errors),
        acl=acl, allowed_hosts=tuple(allowed_hosts), throttles=dict(throttles or {}),
        defaults=defaults_json(defaults), content_hash=content_hash, calendars=calendars,
    )


def _by_line(errors: Iterable[ConfigError]) -> list[ConfigError]:
    return sorted(errors, key=lambda error: error.line)


# --- top-level fields ----------------------------------------------------------------

def _allowed_hosts(top: Checker, value: Any) -> tuple[str, ...]:
    hosts = []
    for index, item in enumerate(top.listing(("allowed_hosts",), value or [])):
        path = ("allowed_hosts", index)
        host = top.attempt(lambda: top.string(path, item, empty=False))
        if host is not None and _NOT_A_HOST.search(host.strip()):
            top.report(path, f"{host!r} is not a host name; write the host alone, e.g. "
                             "metadata.google.internal")
        elif host is not None:
            hosts.append(host.strip())
    return tuple(hosts)


def _empty_acl() -> dict[str, list[str]]:
    return {role: [] for role in ACL_ROLES}


def _acl(top: Checker, value: Any) -> dict[str, list[str]]:
    acl = top.mapping(("acl",), value or {}, "{readers: [group:everyone]}")
    top.known_fields(("acl",), acl, ACL_ROLES)
    result = _empty_acl()
    for role in ACL_ROLES:
        path = ("acl", role)
        members = top.attempt(lambda: top.listing(path, acl.get(role) or []), [])
        for index, member in enumerate(members):
            text = top.attempt(lambda: top.string(path + (index,), member))
            if text is not None and not _MEMBER.fullmatch(text):
                top.report(path + (index,), f"{text!r} is not a member: write user:EMAIL, "
                                            "group:NAME, serviceAccount:EMAIL or anonymous")
            elif text is not None:
                result[role].append(text)
    return result


def _throttles(top: Checker, value: Any) -> dict[str, int]:
    """Name -> max_in_flight; a broken entry still declares its name (as 0)."""
    throttles = top.mapping(("throttles",), value or {}, "{backup-consumers: {max_in_flight: 20}}")
    result = {}
    for name, spec in throttles.items():
        path = ("throttles", name)
        if not JOB_ID.fullmatch(name):
            top.report(path, f"'{name}' is not a valid throttle name (letters, digits, '_', "
                             "'.', '-')", named=False)
        result[name] = top.attempt(lambda: _throttle(top, path, spec), 0)
    return result


def _throttle(top: Checker, path: Path, spec: Any) -> int:
    spec = top.mapping(path, spec, "{max_in_flight: 20}")
    top.known_fields(path, spec, ("max_in_flight",))
    if spec.get("max_in_flight") is None:
        top.fail(path, "needs max_in_flight, e.g. {max_in_flight: 20}")
    return top.integer(path + ("max_in_flight",), spec["max_in_flight"], 1)


def _entries(top: Checker, value: Any) -> list[Any]:
    if value is None:
        return []
    return top.listing(("jobs",), value)


def _ids(entries: list[Any]) -> list[str]:
    """The valid ids the entries carry, in order (duplicates included)."""
    return [entry["id"] for entry in entries if isinstance(entry, dict)
            and isinstance(entry.get("id"), str) and JOB_ID.fullmatch(entry["id"])]


def _check_default_references(top: Checker, context: JobContext) -> None:
    throttle = context.defaults.get("throttle")
    if throttle is not None and context.throttles is not None \
            and throttle not in context.throttles:
        top.report(("defaults", "throttle"), f"unknown throttle '{throttle}'")
    if context.known_jobs is None:
        return  # triggers are not checked
    for name in map(trigger_name, context.defaults.get("triggers", ())):
        if name not in context.known_jobs:
            top.report(("defaults", "triggers"), f"unknown job '{name}' in this project")


# --- jobs ----------------------------------------------------------------------------

def _jobs(filename: str, lines: LineMap, entries: list[Any],
          context: JobContext) -> tuple[list[JobConfig], list[ConfigError]]:
    first_line: dict[str, int] = {}
    duplicated = _duplicates(_ids(entries))
    loaded: dict[str, tuple[int, JobConfig]] = {}
    errors: list[ConfigError] = []
    for index, entry in enumerate(entries):
        path = ("jobs", index)
        check = Checker(filename, lines, base=path, label=f"jobs[{index}]: ")
        if not isinstance(entry, dict):
            check.report(path, f"expected a job entry (a map with id, schedule, target), "
                               f"got {describe_value(entry)}", named=False)
            errors += check.errors
            continue
        job_id = entry_id(check, path, entry)
        if job_id is not None:
            check.label, check.job = f"job '{job_id}': ", job_id
            if job_id in first_line:
                check.report(path + ("id",), f"id is also used at line {first_line[job_id]}; "
                             "ids must be unique in a project, so no entry with this id is "
                             "loaded", named=False)
            first_line.setdefault(job_id, lines.line(path))
        job = parse_entry(check, path, entry, job_id or "", context)
        errors += check.errors
        if job is not None and job_id is not None and job_id not in duplicated:
            loaded[job_id] = (index, job)
    errors += _break_cycles(filename, lines, entries, loaded)
    jobs = sorted(loaded.values(), key=lambda item: item[0])
    return with_reports([job for _, job in jobs]), _by_line(errors)


def _duplicates(ids: Sequence[str]) -> set[str]:
    seen: set[str] = set()
    duplicated: set[str] = set()
    for job_id in ids:
        (duplicated if job_id in seen else seen).add(job_id)
    return duplicated


def _break_cycles(filename: str, lines: LineMap, entries: list[Any],
                  loaded: dict[str, tuple[int, JobConfig]]) -> list[ConfigError]:
    """Skip the job closing each cycle of triggers (and of `after`: an upstream job leads
    to its fan-in jobs) until none is left; their errors."""
    errors: list[ConfigError] = []
    while True:
        jobs = {job_id: job for job_id, (_, job) in loaded.items()}
        waits = after_edges(jobs)
        graph = {job_id: job.definition.trigger_targets + waits.get(job_id, ()) for job_id, job in jobs.items()}
        cycle = trigger_cycle(graph)
        if cycle is None:
            return errors
        closer, target = cycle[-2], cycle[-1]
        if closer not in jobs[target].policy.after:
            index = loaded.pop(closer)[0]
            raw = entries[index].get("triggers")
            named = [item.get("job") if isinstance(item, dict) else item for item in raw] \
                if isinstance(raw, list) else []
            # The edge may come from the defaults block; then the entry itself is the place.
            where = ("jobs", index, "triggers", named.index(target)) if target in named else ("jobs", index)
        else:  # the fan-in job's `after` closes it: that job is skipped, at the upstream's line
            closer, index = target, loaded.pop(target)[0]
            where = ("jobs", index, "after", list(jobs[target].policy.after).index(cycle[-2]))
        errors.append(ConfigError(filename, lines.line(where),
                                  f"job '{closer}': trigger cycle: {' -> '.join(cycle)}",
                                  job=closer))


def trigger_cycle(graph: Mapping[str, Sequence[str]]) -> list[str] | None:
    """The first cycle of `graph` (job -> jobs it triggers) as [a, b, ..., a], or None.

    Depth first from each job in the graph's order, so the answer is deterministic;
    iterative, so that long chains of triggers do not hit the recursion limit. Names
    the graph does not contain (jobs defined elsewhere) end a path.
    """
    done: set[str] = set()
    for start in graph:
        if start in done:
            continue
        stack = [start]
        on_path = {start: 0}
        pending = [iter(graph[start])]
        while pending:
            following = next(pending[-1], None)
            if following is None:
                done.add(stack[-1])
                del on_path[stack.pop()]
                pending.pop()
            elif following in on_path:
                return stack[on_path[following]:] + [following]
            elif following in graph and following not in done:
                on_path[following] = len(stack)
                stack.append(following)
                pending.append(iter(graph[following]))
    return None
