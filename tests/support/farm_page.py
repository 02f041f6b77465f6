"""The farm page's test setup, shared by its browser test and bench/farm_page.py: headless Chromium through
Selenium, `farm gateway` in a process of its own, and an embedded farm with 50 open batches and six pools."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from farm.app.embedded import EmbeddedFarm, free_port
from farm.client.sync import RewardClient
from farm.config import Settings
from farm.protocol import heartbeat
from farm.store.engine import database_url
from farm.store.tenants import create_tenant

STAGES = ("synthetic.compile", "synthetic.execute", *(f"other.s{i}" for i in range(1, 5)))
BATCHES = 50


def headless_chromium(chromium: str, driver: str):
    """A headless Chromium through Selenium, sized so the page's charts are laid out as on a desk."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1200", "--no-first-run", "--disable-background-networking"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=options)


def browser_parts() -> tuple[str | None, str | None, str | None]:
    """Chromium, its driver and Selenium as found here (None where missing), and what is missing first."""
    try:
        import selenium  # noqa: F401
        has_selenium = True
    except ImportError:
        has_selenium = False
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    missing = ("selenium" if not has_selenium else "chromium" if chromium is None
               else "chromium-driver" if driver is None else None)
    return chromium, driver, missing


def wait(check, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s:g} s")
        time.sleep(0.05)
    return value


@contextmanager
def farm_gateway(settings: Settings) -> Iterator[tuple[str, int]]:
    """`farm gateway` as an operator runs it, in a process of its own (its CPU can be measured): base URL, pid."""
    import httpx

    def answers() -> bool:
        try:
            return httpx.get(base + "/openapi.json", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    port = free_port()
    env = {**os.environ, "FARM_REDIS_URL": settings.redis_url, "FARM_NAMESPACE": settings.namespace,
           "FARM_DATABASE_URL": database_url(settings), "FARM_DATA_DIR": settings.data_dir}
    proc = subprocess.Popen([sys.executable, "-m", "farm.app.cli", "gateway", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait(answers, 60, "farm gateway to listen")
        yield base, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def fifty_open_batches(data_dir: str) -> Iterator[tuple[EmbeddedFarm, str]]:
    """An embedded farm with 50 open batches and six pools in a planner's heartbeat; an operator's token."""
    import redis

    with EmbeddedFarm(Settings(data_dir=data_dir), workers={q: 0 for q in STAGES[:2]}) as farm:
        _, token = create_tenant(farm.engine, "ops", operator=True, now=time.time())
        with RewardClient(farm.settings) as client:
            for i in range(BATCHES):
                client.open_batch(f"task-{i % 5}", "synthetic", 8, batch_id=f"b{i:02d}").submit(
                    "r0", {"times": [1.0, 1.0]})
        r = redis.Redis.from_url(farm.settings.redis_url)
        pools = {q: heartbeat.Pool(running=2, starting=1) for q in STAGES}
        stop = threading.Event()

        def beating() -> None:  # a planner daemon's heartbeat for six pools, every second
            while True:
                beat = heartbeat.Heartbeat(pid=1, at=time.time(), backend="local", pools=pools,
                                           targets={q: 3 for q in STAGES})
                heartbeat.beat(r, farm.settings.namespace, beat, 30)
                if stop.wait(1.0):
                    return

        beater = threading.Thread(target=beating, daemon=True)
        beater.start()
        try:
            yield farm, token
        finally:
            stop.set()
            beater.join()
            r.close()


def drawn_ms(browser) -> float | None:
    """When the page had drawn both its batches and its pools, in ms from the navigation's start."""
    stamps = browser.execute_script("const d = document.documentElement.dataset; return [d.liveAt, d.poolsAt]")
    return max(float(s) for s in stamps) if all(stamps) else None
