"""Settings a container or a newcomer trips on: a start with no home directory at all,
and the port from SUNDIAL_PORT."""

import pwd

import pytest

from config.settings import _credentials_file, from_environment


def test_no_home_and_no_passwd_entry_is_no_credentials_file_not_a_crash(monkeypatch):
    # A container run as an arbitrary uid has neither HOME nor an entry in /etc/passwd,
    # where Path("~").expanduser() raises RuntimeError.
    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    assert _credentials_file({}) == ""


def test_the_gcloud_folder_under_home_is_still_where_credentials_are_looked_for(tmp_path):
    found = tmp_path / ".config" / "gcloud" / "application_default_credentials.json"
    found.parent.mkdir(parents=True)
    found.write_text("{}")
    assert _credentials_file({"HOME": str(tmp_path)}) == str(found)


def test_sundial_port_sets_the_port_and_a_port_out_of_range_stops_the_start():
    assert from_environment({"SUNDIAL_PORT": "9000"}).port == 9000
    assert from_environment({}).port == 8080
    with pytest.raises(SystemExit, match="SUNDIAL_PORT: expected a port from 1 to 65535, got 0"):
        from_environment({"SUNDIAL_PORT": "0"})
