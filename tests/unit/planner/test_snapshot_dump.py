"""FARM_PLANNER_DUMP_DIR: the daemon's decisions pickled for comparison with a replay's (off by default)."""

from __future__ import annotations

import pickle

from planner.runtime.service import snapshot_dumper


def test_no_directory_dumps_nothing():
    assert snapshot_dumper(None) is None
    assert snapshot_dumper("") is None


def test_each_decision_is_one_pickle_of_snapshot_knobs_and_decision_in_order(tmp_path):
    dump = snapshot_dumper(str(tmp_path / "dumps"))
    dump({"now": 1.0}, "knobs", "first")
    dump({"now": 2.0}, "knobs", "second")
    files = sorted((tmp_path / "dumps").iterdir())
    assert [pickle.loads(f.read_bytes()) for f in files] == [({"now": 1.0}, "knobs", "first"),
                                                            ({"now": 2.0}, "knobs", "second")]
