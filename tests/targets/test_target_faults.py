"""Both HTTP stacks against every way a target can fail (tests/support/misbehaving.py):
the blocking pool (a manual trigger, a retry, a hook, every cloud delivery) and the
batch writer of staged requests (a scheduled occurrence on one machine). Each case must
end its attempt with the same reason on both, within the attempt's timeout plus a
second; the server-level suite (tests/e2e/test_target_faults.py) then runs the same
cases through the scheduler itself.

All cases of a stack run at once, so the whole file takes about one timeout.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from engine.ports import DeliveryResult
from engine.targets.http import HttpTarget
from tests.support.misbehaving import CASES, Targets
from tests.targets.support import delivery

TIMEOUT = 2.0


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    made = Targets(tmp_path_factory.mktemp("tls"))
    yield made
    made.close()


@pytest.fixture(scope="module")
def trusting_target(targets):
    """An HttpTarget that trusts the tests' certificate authority (and nothing else)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SSL_CERT_FILE", str(targets.authority.bundle))
        target = HttpTarget()
    yield target
    target.close()


def _blocking(target: HttpTarget, url: str) -> tuple[DeliveryResult, float]:
    began = time.monotonic()
    result = target.deliver(delivery(url, timeout=f"{TIMEOUT:g}s"))
    return result, time.monotonic() - began


def _staged(target: HttpTarget, writer, url: str) -> tuple[DeliveryResult, float]:
    request = delivery(url, timeout=f"{TIMEOUT:g}s")
    staged = target.stage(request)
    began = time.monotonic()
    if staged is None:  # what the pipeline does with a request it cannot stage: sent unstaged
        return _blocking(target, url)
    ended, box, checked = threading.Event(), {}, []

    def done(outcome):
        box["outcome"] = outcome
        ended.set()
    writer.submit([staged.outgoing(ready=lambda: checked.append(True) or True, done=done)])
    assert ended.wait(TIMEOUT + 10), "the writer never ended the request"
    outcome = box["outcome"]
    assert outcome is not None, "a failure was reported as 'not sent'"
    # The attempt is the caller's only if its leases held when it went (or failed to):
    # an outcome reported without that check is given up by the caller, unrecorded.
    assert checked, "an outcome reported without the check before the write"
    result = staged.answered(outcome, began) or staged.finish(outcome, began)
    return result, time.monotonic() - began


@pytest.fixture(scope="module")
def outcomes(targets, trusting_target):
    """(stack, case) -> (result, seconds), every case of both stacks run at once."""
    writer = trusting_target.batch_writer(lambda work: threading.Thread(target=work, daemon=True).start())
    writer.start()
    with ThreadPoolExecutor(len(CASES) * 2) as pool:
        futures = {}
        for case in CASES:
            url = targets.url(case.name)
            futures["blocking", case.name] = pool.submit(_blocking, trusting_target, url)
            futures["staged", case.name] = pool.submit(_staged, trusting_target, writer, url)
        results = {key: future.result() for key, future in futures.items()}
    writer.shutdown()
    return results


@pytest.mark.parametrize("stack", ["blocking", "staged"])
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_every_failure_ends_the_attempt_with_its_reason_within_the_timeout(outcomes, stack, case):
    result, seconds = outcomes[stack, case.name]
    assert result.outcome == "failed", (case.why, result)
    assert case.reason in result.reason, (case.why, result.reason)
    assert seconds <= (TIMEOUT + 1 if not case.at_once else 1), f"{case.why}: ended after {seconds:.2f} s"


def test_both_stacks_give_the_same_reason(outcomes):
    differ = {case.name: (outcomes["blocking", case.name][0].reason, outcomes["staged", case.name][0].reason)
              for case in CASES
              if outcomes["blocking", case.name][0].reason != outcomes["staged", case.name][0].reason}
    assert not differ
