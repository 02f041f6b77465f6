"""`farm.native.build`: a small C helper built once per content of its source, used only from a directory
that only this user can write."""

from __future__ import annotations

import os
import shutil

import pytest

from farm import native

pytestmark = pytest.mark.skipif(not any(shutil.which(c, path=native.TOOLS) for c in native.COMPILERS),
                                reason="no C compiler")
SOURCE = b"int main(void) { return 0; }\n"


def _dir(tmp_path, mode=0o700):
    d = tmp_path / "cache"
    d.mkdir()
    os.chmod(d, mode)
    return str(d)


def test_a_helper_is_built_once_per_source_and_found_again(tmp_path):
    d = _dir(tmp_path)
    first = native.build(SOURCE, d, "helper", [["-O2"]])
    built_at = os.stat(first).st_mtime_ns
    assert native.build(SOURCE, d, "helper", [["-O2"]]) == first and os.stat(first).st_mtime_ns == built_at
    other = native.build(SOURCE + b"/* another */\n", d, "helper", [["-O2"]])
    assert other != first and sorted(os.listdir(d)) == sorted([os.path.basename(first), os.path.basename(other)])


def test_the_first_flags_that_build_are_taken(tmp_path):
    assert native.build(SOURCE, _dir(tmp_path), "helper", [["-no-such-flag"], ["-O2"]]) is not None


def test_nothing_is_built_or_used_in_a_directory_others_can_write(tmp_path):
    d = _dir(tmp_path, 0o777)
    assert native.build(SOURCE, d, "helper", [["-O2"]]) is None and os.listdir(d) == []


def test_a_helper_others_can_write_is_not_used(tmp_path):
    d = _dir(tmp_path)
    path = native.build(SOURCE, d, "helper", [["-O2"]])
    os.chmod(path, 0o777)
    assert native.build(SOURCE, d, "helper", [["-O2"]]) is None


def test_without_a_compiler_or_with_a_source_that_does_not_build_there_is_none(tmp_path):
    d = _dir(tmp_path)
    assert native.build(SOURCE, d, "helper", [["-O2"]], compilers=("no-such-compiler",)) is None
    assert native.build(b"int main(void) { return }\n", d, "helper", [["-O2"]]) is None
    assert os.listdir(d) == []
