"""A worker at INFO writes no log line per task served well: Flower and the history hold each task's outcome."""

from __future__ import annotations

import pytest

from farm.results import Status

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_a_worker_at_info_logs_its_start_but_no_line_per_task_served(tmp_path):
    from farm.app.embedded import EmbeddedFarm
    from farm.client.sync import RewardClient
    from farm.config import Settings

    with EmbeddedFarm(Settings(data_dir=str(tmp_path)), workers={"synthetic.compile": 1, "synthetic.execute": 1}) as farm:
        farm.wait_ready()
        with RewardClient(farm.settings) as client:
            batch = client.open_batch("log-lines", "synthetic", 3)
            batch.submit_many([(f"r{i}", {"times": [0.001, 0.001]}) for i in range(3)])
            results = batch.gather(timeout=60)
        logs = {w.name: (farm.backend.dir / f"{w.name}.log").read_text() for w in farm.backend.list()}

    assert [r.status for r in results] == [Status.OK] * 3
    assert len(logs) == 2 and all("ready." in text for text in logs.values())  # Celery's INFO line at its start
    assert not any("succeeded in" in text or "received" in text for text in logs.values())
