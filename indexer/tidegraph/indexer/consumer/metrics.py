"""Prometheus metrics of the indexer: what was applied, what waits, what failed."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECORDS = Counter(
    "tidegraph_indexer_records_total",
    "Records handled, by realm and outcome (applied, noop, stale, deleted, failed, dead_lettered).",
    ["realm", "outcome"],
)
LAG = Gauge(
    "tidegraph_indexer_consumer_lag",
    "Records between the partition's high watermark and the applied position.",
    ["topic", "partition"],
)
APPLY_SECONDS = Histogram(
    "tidegraph_indexer_apply_seconds",
    "Time to write one record's transaction.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
PREPARE_SECONDS = Histogram(
    "tidegraph_indexer_prepare_seconds",
    "Time to chunk, extract and embed one document version.",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60),
)
PAUSED = Gauge(
    "tidegraph_indexer_paused_partitions",
    "Partitions paused after a transient failure, waiting to retry.",
)
TRANSIENT_FAILURES = Counter(
    "tidegraph_indexer_transient_failures_total",
    "Transient failures that paused a partition, by error class.",
    ["error_class"],
)
HELD = Gauge(
    "tidegraph_indexer_held_realms",
    "Realms held at a record that cannot be applied until its cause is fixed (other realms"
    " of the partition go on).",
)
HELD_FAILURES = Counter(
    "tidegraph_indexer_held_failures_total",
    "Failures that held a realm at a record (not retriable), by realm and error class.",
    ["realm", "error_class"],
)
