"""The web UI over the API's test harness: a real SQLite store, a fake clock, tasks run
inline, Flask's test client; and a role switch standing in for the project ACLs."""

from __future__ import annotations

import re

import pytest

from tests.web.conftest import Api
from web import access
from web.errors import ApiError

ROLES = {  # what each role of docs/REFERENCE.md section 6 may do
    "owner": {access.READ, access.TRIGGER, access.OWN},
    "triggerer": {access.READ, access.TRIGGER},
    "reader": {access.READ},
    "nobody": set(),
}
HIDDEN_TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


class Ui(Api):
    def page(self, path: str, status: int = 200) -> str:
        response = self.client.get(path)
        assert response.status_code == status, response.data.decode()[:500]
        return response.data.decode()

    def token(self, job: str = "from-config") -> str:
        """The CSRF token of this client's session, as the job's page puts it in its forms."""
        match = HIDDEN_TOKEN.search(self.page(f"/p/demo/{job}"))
        assert match, "the job's page has no form"
        return match.group(1)

    def press(self, job: str, action: str, token: str | None = None, **form):
        """POST a button's form; the token of this session unless one is given."""
        form["csrf_token"] = self.token(job) if token is None else token
        return self.client.post(f"/p/demo/{job}:{action}", data=form)


@pytest.fixture
def ui(tmp_path) -> Ui:
    return Ui(tmp_path)


@pytest.fixture
def role(monkeypatch):
    """`role("reader")` makes web/access.py's hook answer as a project ACL would."""
    def become(name: str) -> None:
        allowed = ROLES[name]

        def authorize(project, permission):
            if access.READ not in allowed:
                raise ApiError("NOT_FOUND", f"project {project.id!r} not found")
            if permission not in allowed:
                raise ApiError("PERMISSION_DENIED", f"{name} may not {permission} in {project.id}")

        monkeypatch.setattr(access, "authorize", authorize)

    return become
