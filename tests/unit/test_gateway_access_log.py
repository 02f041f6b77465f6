"""The access log shows a path rebuilt from the gateway's routes: a token never appears, in whatever form a
request carries it, while the rest of the path stays readable for the operator."""

from __future__ import annotations

import pytest

from farm.app.gateway.access_log import Paths, client_address
from farm.app.gateway.app import create_app, templates
from farm.app.gateway.auth import Directory
from farm.app.gateway.config import trusted_proxies
from farm.errors import InvalidInput

TOKEN = "rf_Zx9-abcDEF_0123456789abcdefghijklmnopqrstu"


@pytest.fixture(scope="module")
def paths() -> Paths:
    return Paths(templates(create_app(lambda: None, Directory(lambda token: None))))


def logged(paths: Paths, path: str, query: bytes = b"", method: str = "GET") -> str:
    return paths.path({"type": "http", "method": method, "path": path, "root_path": "", "query_string": query})


@pytest.mark.parametrize("path,query,method,shown", [
    (f"/t/{TOKEN}/get_reward", b"", "POST", "/t/***/get_reward"),
    (f"/t/{TOKEN}", b"", "GET", "/t/***"),
    (f"/t/{TOKEN}/", b"", "GET", "/t/***/"),
    (f"/T/{TOKEN}/get_reward", b"", "POST", "/***/***/get_reward"),
    (f"//t/{TOKEN}/v1/ping", b"", "GET", "//t/***/v1/ping"),
    (f"/t/{TOKEN}/ui", b"", "GET", "/t/***/ui"),
    (f"/t/{TOKEN}/ui/farm.js", b"", "GET", "/t/***/ui/farm.js"),
    (f"/t/{TOKEN[:10]}/{TOKEN[10:]}/run_code", b"", "POST", "/t/***/***/run_code"),  # a decoded %2F
    (f"/t/{TOKEN}/v1/batches/b1/results", b"cursor=0-0&wait_s=5", "GET", "/t/***/v1/batches/b1/results?cursor=0-0&wait_s=5"),
    (f"/t/{TOKEN}/v1/batches/b1/results", f"token={TOKEN}&limit=3".encode(), "GET",
     "/t/***/v1/batches/b1/results?***=***&limit=3"),
    ("/v1/batches/b1/results", f"cursor={TOKEN}".encode(), "GET", "/v1/batches/b1/results?cursor=***"),
    (f"/v1/batches/{TOKEN}", b"", "GET", "/v1/batches/***"),
    (f"/get_reward/{TOKEN}", b"", "POST", "/get_reward/***"),
    (f"/t/{TOKEN}/get_reward", b"", "GET", "/t/***/get_reward"),  # a route's path with the wrong method
], ids=["prefix", "no-trailing-slash", "trailing-slash", "upper-case-T", "double-slash", "farm-page", "farm-page-js",
        "split-by-encoded-slash", "query-kept", "query-token", "query-value-token", "batch-id-token",
        "unknown-route", "wrong-method"])
def test_no_form_of_a_token_reaches_the_log(paths, path, query, method, shown):
    line = logged(paths, path, query, method)
    assert line == shown and TOKEN not in line and TOKEN[:12] not in line


def test_a_path_without_a_token_is_logged_as_it_is(paths):
    assert logged(paths, "/v1/batches/step-7/groups", b"after=2&wait_s=10") == "/v1/batches/step-7/groups?after=2&wait_s=10"


def test_the_client_address_is_host_and_port():
    assert client_address({"client": ("10.1.2.3", 5050)}) == "10.1.2.3:5050"
    assert client_address({"client": None}) == "-"


def test_trusted_proxies_are_networks_and_none_by_default():
    assert trusted_proxies("") == () and trusted_proxies(None) == ()
    assert trusted_proxies("127.0.0.1, 10.0.0.0/8,::1") == ("127.0.0.1/32", "10.0.0.0/8", "::1/128")


@pytest.mark.parametrize("text", ["*", "proxy.local", "10.0.0.0/33"])
def test_a_proxy_that_is_not_an_address_is_refused(text):
    with pytest.raises(InvalidInput, match="not an IP address"):
        trusted_proxies(text)
