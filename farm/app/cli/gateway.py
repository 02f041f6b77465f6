"""`farm gateway`: the HTTP front door (native API, OpenRLHF's /get_reward, SandboxFusion's /run_code) for
trainers in any language or outside the farm's network; callers are tenants (`farm tenants`)."""

from __future__ import annotations

import logging

import click

from farm.app.cli.common import require_redis, settings_options
from farm.config import Settings


@click.command()
@settings_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(1, 65535), default=8600, show_default=True)
@click.option("--max-body-mb", type=click.FloatRange(min=0.001), default=64.0, show_default=True,
              help="Largest request body (a bulk submit's).")
@click.option("--body-timeout-s", type=click.FloatRange(min=0.1), default=30.0, show_default=True,
              help="A request body that takes longer to arrive is refused (408).")
@click.option("--forwarded-allow-ips", default="", show_default="none",
              help="Comma list of the proxies' addresses or networks (CIDR, e.g. 10.0.0.0/8) whose X-Forwarded-For "
                   "names the caller in the access log; from any other peer the header is ignored.")
def gateway(settings: Settings, host: str, port: int, max_body_mb: float, body_timeout_s: float,
            forwarded_allow_ips: str) -> None:
    """Serve the farm over HTTP until stopped."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        from farm.app.gateway.config import GatewaySettings, trusted_proxies
        from farm.app.gateway.server import serve
    except ImportError as exc:  # the gateway's web stack is an extra
        raise click.ClickException(f"the gateway needs its extra: pip install 'reward-farm[gateway]' ({exc})") from exc
    from farm.errors import InvalidInput
    try:
        proxies = trusted_proxies(forwarded_allow_ips)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), param_hint="--forwarded-allow-ips") from exc
    require_redis(settings)
    from farm.store.engine import StoreError
    try:
        serve(settings, host, port, GatewaySettings(max_body_bytes=int(max_body_mb * (1 << 20)),
                                                    body_timeout_s=body_timeout_s, forwarded_allow_ips=proxies))
    except StoreError as exc:
        raise click.ClickException(str(exc)) from exc
