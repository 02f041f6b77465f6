"""The compiled launcher (workers/sandbox/launcher.c): a run's rlimits, uid, gid and no groups in one exec, the same
as prlimit then setpriv gave it; refusing anything it cannot apply before it runs the program."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest

from workers import sandbox
from workers.sandbox import launch, launcher
from workers.sandbox.limits import Limits

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(os.geteuid() != 0, reason="the launcher drops root: it needs root to test"),
              pytest.mark.skipif(not any(shutil.which(c) for c in ("cc", "gcc", "clang")), reason="no C compiler")]

PY = sandbox.python_executable()
SHOW = ("import os, resource; print(os.getresuid(), os.getresgid(), os.getgroups(), "
        "[resource.getrlimit(getattr(resource, 'RLIMIT_' + n)) for n in ('CPU', 'FSIZE', 'NOFILE', 'CORE', 'AS')])")


@pytest.fixture(autouse=True)
def fresh_builds():
    """Each test finds the launcher through `built` anew, and leaves no cached path to a directory it removes."""
    launcher.built.cache_clear()
    yield
    launcher.built.cache_clear()


@pytest.fixture(scope="module")
def built() -> str:
    state = tempfile.mkdtemp(prefix="farm-launcher-")
    path = launcher.built(state)
    assert path is not None
    return path


def _launch(built: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([built, *args], capture_output=True, text=True, timeout=30)


def test_the_launcher_sets_the_limits_and_the_uid_and_gid_and_drops_every_group(built):
    done = _launch(built, "61998", "61997", "cpu=5:6", "nofile=64:64", "core=0:0", "--", PY, "-I", "-S", "-c",
                   "import os, resource; print(os.getresuid(), os.getresgid(), os.getgroups(), "
                   "resource.getrlimit(resource.RLIMIT_CPU), resource.getrlimit(resource.RLIMIT_NOFILE))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "(61998, 61998, 61998) (61997, 61997, 61997) [] (5, 6) (64, 64)"


@pytest.mark.parametrize("args", [
    ["0", "61997", "--", "/bin/sh", "-c", "touch {mark}"],  # root: never
    ["61998", "0", "--", "/bin/sh", "-c", "touch {mark}"],
    ["61998", "61997", "bogus=1:2", "--", "/bin/sh", "-c", "touch {mark}"],  # a limit it does not know
    ["61998", "61997", "cpu=6:5", "--", "/bin/sh", "-c", "touch {mark}"],  # soft above hard
    ["61998", "61997", "cpu=-1:5", "--", "/bin/sh", "-c", "touch {mark}"],
    ["61998", "61997", "cpu=5", "--", "/bin/sh", "-c", "touch {mark}"],
    ["61998", "61997", "nofile=99999999:99999999", "--", "/bin/sh", "-c", "touch {mark}"],  # above what root may
    ["61998x", "61997", "--", "/bin/sh", "-c", "touch {mark}"],
    ["61998", "61997", "cpu=5:6"],  # no program
])
def test_the_launcher_refuses_what_it_cannot_apply_and_runs_nothing(built, args, tmp_path):
    mark = tmp_path / "ran"
    os.chmod(tmp_path, 0o777)
    done = _launch(built, *(a.format(mark=mark) for a in args))
    assert done.returncode == 127 and "farm sandbox launcher" in done.stderr
    assert not mark.exists()


@pytest.fixture(params=["compiled", "util-linux"])
def first_exec(request, monkeypatch):
    monkeypatch.setenv(launcher.CHOICE, request.param)
    return request.param


def test_a_contained_run_gets_the_same_identity_and_limits_through_either_first_exec(monkeypatch):
    seen = {}
    for choice in ("compiled", "util-linux"):
        monkeypatch.setenv(launcher.CHOICE, choice)
        r = sandbox.run([PY, "-I", "-S", "-c", SHOW], limits=Limits(wall_s=5))
        assert r.ok, r.stderr
        seen[choice] = r.stdout
    assert seen["compiled"] == seen["util-linux"]
    assert seen["compiled"].startswith(b"(1000, 1000, 1000) (1000, 1000, 1000) []")


def test_each_first_exec_is_the_one_chosen(first_exec):
    argv = launch.Launch(True, ["/bin/true"], Limits(), 61998, None, "/")._dropping()
    if first_exec == "compiled":
        assert os.path.basename(argv[0]).startswith("launcher-") and argv[1:3] == ["61998", "61998"]
    else:
        assert os.path.basename(argv[0]) == "prlimit" and "setpriv" in os.path.basename(argv[argv.index("--") + 1])


def test_the_launcher_is_built_once_per_source_and_again_when_the_source_changes(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir()
    first = launcher.built(str(state))
    launcher.built.cache_clear()
    assert launcher.built(str(state)) == first  # found, not built again
    changed = tmp_path / "launcher.c"
    changed.write_bytes(launcher.SOURCE.read_bytes() + b"\n/* changed */\n")
    monkeypatch.setattr(launcher, "SOURCE", changed)
    launcher.built.cache_clear()
    second = launcher.built(str(state))
    assert second is not None and second != first and os.path.isfile(second)
    assert sorted(os.listdir(state)) == sorted([os.path.basename(first), os.path.basename(second)])  # no leftovers


def test_without_a_compiler_runs_start_through_prlimit_and_setpriv(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "_COMPILERS", ("no-such-compiler",))
    assert launcher.built(str(tmp_path)) is None
    assert os.listdir(tmp_path) == []


def test_an_unknown_launcher_choice_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setenv(launcher.CHOICE, "bash")
    with pytest.raises(ValueError, match="'compiled' or 'util-linux'"):
        launcher.path()


def test_a_launcher_or_state_directory_others_can_write_is_never_used(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    target = launcher.built(str(state))
    assert target is not None
    os.chmod(target, 0o777)  # anyone could have replaced it
    launcher.built.cache_clear()
    assert launcher.built(str(state)) is None
    os.chmod(target, 0o755)
    os.chmod(state, 0o777)  # anyone could plant one
    launcher.built.cache_clear()
    assert launcher.built(str(state)) is None


def test_a_launcher_that_does_not_compile_leaves_nothing_and_runs_go_through_prlimit_and_setpriv(tmp_path, monkeypatch):
    broken = tmp_path / "launcher.c"
    broken.write_bytes(b"int main(void) { return }\n")
    monkeypatch.setattr(launcher, "SOURCE", broken)
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    assert launcher.built(str(state)) is None
    assert os.listdir(state) == []
