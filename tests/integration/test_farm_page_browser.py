"""The farm page in a real browser: headless Chromium (Debian's `chromium` and `chromium-driver`, through
Selenium) opens `farm gateway`'s `/ui` against a live embedded farm replaying a trace and checks what a
person would see, and that a page of 50 open batches and 6 stages shows them all (how fast it draws and
what it costs the farm: bench/farm_page.py, which shares this setup). Screenshots go to FARM_TEST_ARTIFACTS
(default: a temporary folder; the path is printed).

Skipped when Chromium, its driver or Selenium is missing, unless FARM_REQUIRE_BROWSER=1 or CI is set
(scripts/test.sh installs them and sets it), which makes that a failure."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from tests.support.farm_page import BATCHES, STAGES, browser_parts, drawn_ms, farm_gateway, fifty_open_batches, \
    headless_chromium
from farm.app.cli import main
from farm.app.embedded import EmbeddedFarm
from farm.app.live_replay.trainer import Trainer
from farm.client.sync import RewardClient
from farm.config import Settings
from farm.knobs import Knobs
from farm.store.knob_store import KnobStore
from farm.store.tenants import create_tenant
from planner.eval.trace import Trace, bundled, read
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _required() -> bool:
    return os.environ.get("FARM_REQUIRE_BROWSER") == "1" or bool(os.environ.get("CI"))


@pytest.fixture(scope="module")
def artifacts() -> Path:
    folder = Path(os.environ.get("FARM_TEST_ARTIFACTS") or tempfile.mkdtemp(prefix="farm-ui-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nfarm page screenshots: {folder}")
    return folder


@pytest.fixture
def browser():
    chromium, driver, missing = browser_parts()
    if missing:
        if _required():
            pytest.fail(f"FARM_REQUIRE_BROWSER=1 (or CI) but {missing} is missing")
        pytest.skip(f"{missing} is missing (apt-get install chromium chromium-driver; pip install selenium)")
    driver = headless_chromium(chromium, driver)
    try:
        yield driver
    finally:
        driver.quit()


def _status(settings: Settings) -> dict:
    env = {"FARM_REDIS_URL": settings.redis_url, "FARM_NAMESPACE": settings.namespace,
           "FARM_DATA_DIR": settings.data_dir}
    return json.loads(CliRunner().invoke(main, ["status", "--json"], env=env).output)


def test_the_page_shows_a_late_batch_first_draws_the_pools_and_matches_farm_status_during_a_replay(
        tmp_path, browser, artifacts):
    from selenium.webdriver.common.by import By

    with EmbeddedFarm(Settings(data_dir=str(tmp_path)), workers_per_stage=1) as farm:
        farm.wait_ready()
        r = redis.Redis.from_url(farm.settings.redis_url)
        KnobStore(farm.engine, r, farm.settings.namespace).save(Knobs(delay_s=1.0))
        r.close()
        _, token = create_tenant(farm.engine, "ops", operator=True, now=time.time())
        late_client = RewardClient(farm.settings)
        late = late_client.open_batch("late-task", "synthetic", 4, batch_id="late-one")
        late.submit("r0", {"times": [0.01, 0.0]})  # 3 more to come: it stays open, past its estimate
        demo = read(bundled("demo"))
        trace = Trace(demo.stages, demo.batches[:4])
        clients = [RewardClient(farm.settings) for _ in trace.tasks]
        t0 = time.time() + 1.5  # the late batch is more than D past its estimate before any other opens
        trainers = [Trainer(c, trace, task, 20.0, t0, lambda task: None) for c, task in zip(clients, trace.tasks)]
        for t in trainers:
            t.start()
        try:
            with farm_gateway(farm.settings) as (base, _):
                eventually(lambda: len(_status(farm.settings)["batches"]) >= 2, 30, what="the replay's batches")
                browser.get(f"{base}/t/{token}/ui")
                eventually(lambda: drawn_ms(browser), 30, what="the page to draw its batches and pools")
                browser.save_screenshot(str(artifacts / "farm-page-replay.png"))
                rows = browser.find_elements(By.CSS_SELECTOR, "#batches tbody tr")
                first = rows[0]
                assert len(rows) >= 2 and first.get_attribute("data-batch") == "late-one"
                assert "late" in first.get_attribute("class").split()
                assert first.find_element(By.CSS_SELECTOR, "[data-field=progress]").text.startswith("1 / 1 / 4")
                status = _status(farm.settings)
                [shown] = [b for b in status["batches"] if b["batch"] == "late-one"]
                assert (shown["done"], shown["arrived"], shown["size"]) == (1, 1, 4) and status["batches"][0] == shown
                # the batches opened directly are the farm's own tenant `-`, at the default share
                share = browser.find_element(By.CSS_SELECTOR, "#tenants tr[data-tenant='-'] [data-field=share]").text
                assert share == "1"
                knob = browser.find_element(By.CSS_SELECTOR, "[data-knob='D (tolerated extra delay)']").text
                assert knob == f"{status['delay_s']:g} s"
                for stage in ("synthetic.compile", "synthetic.execute"):
                    chart = browser.find_element(By.CSS_SELECTOR, f"svg.pool-chart[data-stage='{stage}']")
                    assert chart.find_elements(By.CSS_SELECTOR, "polyline[data-series=running]"), stage
                    assert chart.is_displayed() and chart.size["width"] > 200
                for t in trainers:
                    t.join(timeout=120)
                # the replay ran to its end while the page was open, every result back
                assert not any(t.is_alive() for t in trainers), "the replay did not finish within 120 s"
                assert all(t.outcome.error is None for t in trainers), [t.outcome.error for t in trainers]
                browser.save_screenshot(str(artifacts / "farm-page-after-replay.png"))
        finally:
            late.cancel()
            for c in (*clients, late_client):
                c.close()


def test_a_page_of_50_open_batches_and_6_stages_lists_every_batch_and_draws_every_pool(
        tmp_path, browser, artifacts):
    with fifty_open_batches(str(tmp_path)) as (farm, token), farm_gateway(farm.settings) as (base, _):
        browser.get(f"{base}/t/{token}/ui")
        eventually(lambda: drawn_ms(browser), 30, what="the page to draw its batches and pools")
        browser.save_screenshot(str(artifacts / "farm-page-50-batches.png"))
        batches = browser.execute_script(
            "return [...document.querySelectorAll('#batches tbody tr')].map(r => r.dataset.batch)")
        charts = browser.execute_script(
            "return [...document.querySelectorAll('svg.pool-chart')].map(c => c.dataset.stage)")
    assert sorted(batches) == [f"b{i:02d}" for i in range(BATCHES)]
    assert sorted(charts) == sorted(STAGES)
