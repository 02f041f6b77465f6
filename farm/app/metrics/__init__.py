"""The farm's Prometheus metrics, served by the recorder (`farm recorder --metrics-port`, and the embedded
farm's recorder under `farm up`): what the history stream says as it is recorded (`history`), and the live
farm read at every scrape (`live`). One endpoint per farm sees everything, whichever process did it."""

from farm.app.metrics.server import DEFAULT_PORT, MetricsServer, MetricsUnavailable, serve

__all__ = ["DEFAULT_PORT", "MetricsServer", "MetricsUnavailable", "serve"]
