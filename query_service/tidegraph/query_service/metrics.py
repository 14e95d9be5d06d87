"""Prometheus metrics of the query service and the change publisher.

Each app and publisher registers on the registry it is given (one per process in
``tidegraph serve``), never on the global default one, so tests can build many apps.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.015, 0.025, 0.05, 0.08, 0.15, 0.3, 0.6, 1.0, 3.0)
_ITEM_BUCKETS = (0, 1, 2, 5, 10, 25, 50, 100, 250, 1000)
_CHAR_BUCKETS = (0, 100, 500, 1000, 2500, 5000, 10_000, 25_000, 50_000, 100_000, 1_000_000)


class ServiceMetrics:
    """HTTP and retrieval metrics."""

    # Long on purpose: one declaration per metric, each with its name, help and labels.
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "tidegraph_http_requests",
            "HTTP requests answered.",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "tidegraph_http_request_seconds",
            "Time to answer an HTTP request.",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.retrieval = Histogram(
            "tidegraph_retrieval_seconds",
            "Time spent in retrieval per mode.",
            ["mode"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.context_items = Histogram(
            "tidegraph_context_items",
            "Items per prompt block of a query answer, retrieved and reaching the prompt.",
            ["block", "stage"],
            buckets=_ITEM_BUCKETS,
            registry=registry,
        )
        self.context_chars = Histogram(
            "tidegraph_context_chars",
            "Characters per prompt block of a query answer, retrieved and reaching the prompt.",
            ["block", "stage"],
            buckets=_CHAR_BUCKETS,
            registry=registry,
        )
        self.telemetry_failures = Counter(
            "tidegraph_telemetry_write_failures",
            "Coverage telemetry records that failed to write (the query was answered).",
            ["realm"],
            registry=registry,
        )
        self.errors = Counter(
            "tidegraph_http_errors",
            "Error answers by code.",
            ["code"],
            registry=registry,
        )
        self.rerank_seconds = Histogram(
            "tidegraph_rerank_seconds",
            "Time spent asking the rerank endpoint, by outcome (reranked, fallback).",
            ["outcome"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.rerank_fallbacks = Counter(
            "tidegraph_rerank_fallbacks",
            "Answers left in retrieval order because the rerank endpoint timed out, failed "
            "or answered malformed.",
            ["reason"],
            registry=registry,
        )
        self.db_checks = Counter(
            "tidegraph_db_checks",
            "The outage gate's database checks by outcome: answered, slow (no answer in"
            " time, but requests completed meanwhile: kept up) or down (503 until it answers).",
            ["result"],
            registry=registry,
        )
        self.standby_lag = Gauge(
            "tidegraph_standby_lag_seconds",
            "Replay lag of each standby when last measured by a read (+Inf: not streaming"
            " from its primary any more, e.g. promoted).",
            ["server", "standby"],
            registry=registry,
        )
        self.realm_reads = Counter(
            "tidegraph_realm_reads",
            "Realm reads by the node that answered (`server` or `server/standby`) and why:"
            " standby, turn (the primary's turn or every standby passed), no_standby.",
            ["node", "reason"],
            registry=registry,
        )
        self.standby_skips = Counter(
            "tidegraph_standby_skips",
            "Reads a standby passed on to the next node: behind (the required sequence not"
            " applied within the wait), lagging, unavailable, failed.",
            ["server", "node", "reason"],
            registry=registry,
        )
        self.feed_held_back = Counter(
            "tidegraph_feed_held_back",
            "Change feed pages answered 503 standbys_behind: a standby of the realm's server"
            " had not replayed them within the wait.",
            ["server", "standby"],
            registry=registry,
        )


class PublisherMetrics:
    """Change publisher metrics, labelled by realm."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.published = Counter(
            "tidegraph_changes_published",
            "Changes acknowledged by Kafka.",
            ["realm"],
            registry=registry,
        )
        self.position = Gauge(
            "tidegraph_publisher_position",
            "Highest commit sequence published.",
            ["realm"],
            registry=registry,
        )
        self.leader = Gauge(
            "tidegraph_publisher_leader",
            "1 while this process publishes the realm.",
            ["realm"],
            registry=registry,
        )
        self.failures = Counter(
            "tidegraph_publisher_failures",
            "Publish rounds that failed and will be retried.",
            ["realm"],
            registry=registry,
        )
        self.held_back = Counter(
            "tidegraph_publisher_held_back",
            "Rounds whose changes waited past the bound for a standby to replay them.",
            ["realm", "standby"],
            registry=registry,
        )
