"""The sandbox's root, made once and made again when the host changes: its /etc (the farm's files and copies of
the host's linker configuration, alternatives links and localtime) and the package directories it covers."""

from __future__ import annotations

import os

import pytest

from workers.sandbox import root


@pytest.fixture
def host(tmp_path):
    """A host's /etc with one of each kind of entry the sandbox copies."""
    etc = tmp_path / "etc"
    (etc / "ld.so.conf.d").mkdir(parents=True)
    (etc / "alternatives").mkdir()
    (etc / "ld.so.cache").write_bytes(b"\x00cache")
    (etc / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (etc / "ld.so.conf.d" / "libc.conf").write_text("/usr/local/lib\n")
    (etc / "ld.so.conf.d" / "private.conf").write_text("/opt/x\n")
    os.chmod(etc / "ld.so.conf.d" / "private.conf", 0o600)
    os.symlink("/usr/bin/python3.11", etc / "alternatives" / "python")
    (tmp_path / "UTC").write_bytes(b"TZif2")
    os.symlink(tmp_path / "UTC", etc / "localtime")
    return str(etc)


@pytest.fixture
def settled_at_once(monkeypatch):
    """Trusts a stamp however young (the tests change files within a clock tick of the previous look)."""
    monkeypatch.setattr(root._Watch, "_SETTLED_NS", 0)


def test_the_etc_dir_holds_the_farms_files_and_the_hosts_entries_as_a_bind_of_each_showed_them(host, tmp_path):
    etc = root.etc_dir(str(tmp_path / "state"), host)
    assert sorted(os.listdir(etc)) == ["alternatives", "group", "hostname", "hosts", "ld.so.cache", "ld.so.conf",
                                       "ld.so.conf.d", "localtime", "nsswitch.conf", "passwd"]
    assert open(f"{etc}/ld.so.cache", "rb").read() == b"\x00cache"
    assert os.readlink(f"{etc}/alternatives/python") == "/usr/bin/python3.11"
    assert not os.path.islink(f"{etc}/localtime") and open(f"{etc}/localtime", "rb").read() == b"TZif2"
    assert os.stat(f"{etc}/ld.so.conf.d/private.conf").st_mode & 0o777 == 0o600
    assert os.stat(f"{etc}/ld.so.conf.d/libc.conf").st_mtime_ns == os.stat(f"{host}/ld.so.conf.d/libc.conf").st_mtime_ns


def test_the_same_content_gives_the_same_etc_dir(host, tmp_path):
    state = str(tmp_path / "state")
    assert root.etc_dir(state, host) == root.etc_dir(state, host)
    assert [name for name in os.listdir(state) if name.startswith("etc-")] == [os.path.basename(root.etc_dir(state, host))]


def test_a_file_edited_in_place_reaches_the_next_etc_dir(host, tmp_path, settled_at_once):
    state = str(tmp_path / "state")
    before = root.etc_dir(state, host)
    with open(f"{host}/ld.so.conf.d/libc.conf", "a") as fh:
        fh.write("/usr/local/cuda/lib64\n")
    after = root.etc_dir(state, host)
    assert after != before and open(f"{after}/ld.so.conf.d/libc.conf").read().endswith("cuda/lib64\n")


def test_a_replaced_alternatives_link_reaches_the_next_etc_dir(host, tmp_path, settled_at_once):
    state = str(tmp_path / "state")
    root.etc_dir(state, host)
    os.symlink("/usr/bin/python3.12", f"{host}/alternatives/python.new")
    os.rename(f"{host}/alternatives/python.new", f"{host}/alternatives/python")
    assert os.readlink(f"{root.etc_dir(state, host)}/alternatives/python") == "/usr/bin/python3.12"


def test_a_host_entry_that_appears_reaches_the_next_etc_dir(host, tmp_path, settled_at_once):
    state = str(tmp_path / "state")
    os.unlink(f"{host}/ld.so.cache")
    assert "ld.so.cache" not in os.listdir(root.etc_dir(state, host))
    open(f"{host}/ld.so.cache", "wb").write(b"\x00new")
    assert open(f"{root.etc_dir(state, host)}/ld.so.cache", "rb").read() == b"\x00new"


def test_an_etc_dir_made_from_a_change_too_recent_to_trust_is_not_remembered(host, tmp_path):
    root.etc_dir(str(tmp_path / "state"), host)  # the host was written just now
    assert ("etc", str(tmp_path / "state"), host) not in root._made


def test_an_etc_dir_cleared_under_a_worker_is_made_again(host, tmp_path, settled_at_once):
    state = str(tmp_path / "state")
    etc = root.etc_dir(state, host)
    os.rename(etc, f"{etc}.gone")
    assert root.etc_dir(state, host) == etc and os.path.isdir(etc)


def test_a_package_directory_that_appears_is_covered_from_the_next_run(tmp_path, settled_at_once):
    tree = str(tmp_path / "tree")
    os.makedirs(f"{tree}/lib/python3.11/site-packages")
    assert root.masks((tree,), ()) == (f"{tree}/lib/python3.11/site-packages",)
    os.makedirs(f"{tree}/lib/python3.13/site-packages")
    assert root.masks((tree,), ()) == (f"{tree}/lib/python3.11/site-packages", f"{tree}/lib/python3.13/site-packages")


def test_a_package_link_that_is_retargeted_is_covered_where_it_now_leads(tmp_path, settled_at_once):
    tree = str(tmp_path / "tree")
    os.makedirs(f"{tree}/lib/python3.11")
    os.makedirs(f"{tree}/pkgs/a")
    os.makedirs(f"{tree}/pkgs/b")
    os.symlink(f"{tree}/pkgs/a", f"{tree}/lib/python3.11/site-packages")
    assert root.masks((tree,), ()) == (f"{tree}/pkgs/a",)
    os.symlink(f"{tree}/pkgs/b", f"{tree}/lib/python3.11/new")
    os.rename(f"{tree}/lib/python3.11/new", f"{tree}/lib/python3.11/site-packages")
    assert root.masks((tree,), ()) == (f"{tree}/pkgs/b",)
