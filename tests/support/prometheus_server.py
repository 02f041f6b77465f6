"""A real Prometheus server of a test's own (Debian's `prometheus` package) on a free loopback port,
scraping given targets every second, and its HTTP API's instant queries."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

REQUIRE_ENV = "FARM_REQUIRE_PROMETHEUS"  # scripts/test.sh installs it and sets this: CI must not skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrometheusServer:
    def __init__(self, folder: Path, metrics_url: str, *, rule_files: tuple[str, ...] = ()) -> None:
        if shutil.which("prometheus") is None:
            if os.environ.get(REQUIRE_ENV) == "1":
                pytest.fail("prometheus is not installed (apt-get install prometheus)")
            pytest.skip("prometheus is not installed (apt-get install prometheus)")
        target = urlsplit(metrics_url)
        self.folder = folder
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        rules = "".join(f"  - {path}\n" for path in rule_files)
        (folder / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            + (f"rule_files:\n{rules}" if rules else "")
            + "scrape_configs:\n  - job_name: reward-farm\n"
            f"    metrics_path: {target.path}\n    static_configs:\n      - targets: ['{target.netloc}']\n")
        self.log = folder / "prometheus.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 30.0) -> "PrometheusServer":
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                ["prometheus", f"--config.file={self.folder / 'prometheus.yml'}",
                 f"--storage.tsdb.path={self.folder / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"prometheus did not become ready: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def api(self, path: str, **params: str) -> dict:
        reply = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10).json()
        assert reply.get("status") == "success", reply
        return reply["data"]

    def query(self, promql: str) -> list[dict]:
        """An instant query's result vector (raises on a query Prometheus refuses)."""
        return self.api("query", query=promql)["result"]

    def value(self, promql: str) -> float | None:
        """The single value of an instant query, None when it returns nothing."""
        found = self.query(promql)
        assert len(found) <= 1, f"{promql} returned {len(found)} series: {found}"
        return float(found[0]["value"][1]) if found else None

    def scraped(self, timeout_s: float = 30.0) -> float:
        """Wait for a scrape after now that succeeded; returns its time."""
        since = time.time()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for t in self.api("targets")["activeTargets"]:
                if t["health"] == "up" and _epoch(t["lastScrape"]) > since:
                    return since
            time.sleep(0.2)
        raise AssertionError(f"no successful scrape within {timeout_s:g} s: {self.api('targets')}")


def _epoch(rfc3339: str) -> float:
    from datetime import datetime

    # Prometheus writes nanoseconds; Python's parser takes at most microseconds
    head, _, rest = rfc3339.partition(".")
    frac = "".join(ch for ch in rest if ch.isdigit())[:6]
    zone = rest[len("".join(ch for ch in rest if ch.isdigit())):] or "Z"
    text = f"{head}.{frac or '0'}{zone}".replace("Z", "+00:00")
    return datetime.fromisoformat(text).timestamp()
