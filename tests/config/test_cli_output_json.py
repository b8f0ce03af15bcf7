"""`--output json` on the commands that need no server: next, render and validate print
one JSON document on stdout, the same content as their text."""

from __future__ import annotations

import json

import cli


def _json(capsys, *argv: str) -> tuple[int, dict]:
    status = cli.main(list(argv))
    return status, json.loads(capsys.readouterr().out)


def test_next_prints_its_times_as_one_document(capsys):
    status, document = _json(capsys, "next", "0 30 2 * * ?", "--after", "2026-03-01T00:00:00Z", "-n", "2",
                             "--tz", "Europe/Berlin", "-o", "json")
    assert (status, document) == (0, {"times": ["2026-03-01T02:30:00+01:00", "2026-03-02T02:30:00+01:00"]})
    assert _json(capsys, "next", "triggered", "--output", "json") == (0, {"times": []})


def test_render_prints_the_rendered_template(capsys):
    status, document = _json(capsys, "render", "${todaysDate}/${jobId}", "--at", "2026-03-08T10:15:00Z",
                             "--job", "j", "--output", "json")
    assert (status, document) == (0, {"rendered": "2026-03-08/j"})


def test_validate_prints_every_error_with_its_file_and_line(capsys, tmp_path):
    (tmp_path / "good.yaml").write_text("jobs: []\n")
    (tmp_path / "bad.yaml").write_text("jobs:\n  - id: x\n    schedule: nope\n    target: {noop: {}}\n")
    status, document = _json(capsys, "validate", str(tmp_path), "-o", "json")
    assert status == 1 and document["files"] == 2
    [error] = document["errors"]
    assert (error["file"], error["line"]) == (str(tmp_path / "bad.yaml"), 3)
    assert "unrecognised schedule 'nope'" in error["message"]
    assert _json(capsys, "validate", str(tmp_path / "good.yaml"), "-o", "json") == (0, {"errors": [], "files": 1})
