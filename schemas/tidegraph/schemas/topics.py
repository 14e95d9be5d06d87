"""The three topics and the settings tidegraph creates them with (CONTRACT.md, "Topics").

Pure values: creating them is ``tidegraph.connectors.topics.ensure_topics``. The documents
topic is the system of record, so it keeps everything forever and stamps each record with the
broker's append time (belief time is taken from it, which keeps replays reproducible).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

DEFAULT_PARTITIONS = 12
MAX_DOCUMENT_BYTES = 8 * 1024 * 1024
"""Default limit on one encoded ``DocumentVersion`` value; larger documents are refused."""
RECORD_OVERHEAD_BYTES = 1024 * 1024
"""Headroom above the document limit for key, headers and record-batch framing."""
NO_UNCLEAN_ELECTION: Mapping[str, str] = MappingProxyType(
    {"unclean.leader.election.enable": "false"}
)
"""On every topic: a leader comes from the in-sync replicas only, since an out-of-sync
replica taking over would drop records the old leader acknowledged (whatever the broker's
own default says)."""


@dataclass(frozen=True)
class Replication:
    """How many copies of each partition, and how many must hold a record before it is
    acknowledged to an ``acks=all`` producer."""

    factor: int
    """Replicas of each partition."""

    @property
    def min_insync(self) -> int:
        """``min.insync.replicas``: 2 of 3 copies, so a write is acknowledged once two brokers
        hold it and one broker can be lost without losing it or stopping writes. With fewer
        copies there is no majority to keep: one must hold it (two of two would stop writes
        at the first loss)."""
        return 2 if self.factor >= 3 else 1


def replication(brokers: int) -> Replication:
    """The replication tidegraph gives its topics (and a local cluster its internal ones) on
    a cluster of ``brokers``: three copies when there are brokers enough."""
    if brokers < 1:
        raise ValueError(f"a cluster has at least one broker, not {brokers}")
    return Replication(factor=min(3, brokers))


@dataclass(frozen=True)
class TopicSpec:
    """A topic as tidegraph wants it to exist."""

    name: str
    """Full topic name, prefix included."""
    partitions: int
    """Partition count on creation (never changed afterwards by tidegraph)."""
    replication_factor: int = -1
    """``-1``: :func:`replication` for the brokers the cluster has when the topic is created."""
    configs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Topic-level settings; only these are compared with an existing topic."""


def max_message_bytes(max_document_bytes: int = MAX_DOCUMENT_BYTES) -> int:
    """The broker-side record limit that admits a document of ``max_document_bytes``."""
    return max_document_bytes + RECORD_OVERHEAD_BYTES


def documents_topic(
    prefix: str = "tidegraph",
    *,
    partitions: int = DEFAULT_PARTITIONS,
    max_document_bytes: int = MAX_DOCUMENT_BYTES,
) -> TopicSpec:
    """``<prefix>.documents``: kept forever, log-append timestamps, room for large documents."""
    return TopicSpec(
        name=f"{prefix}.documents",
        partitions=partitions,
        configs=MappingProxyType(
            {
                "cleanup.policy": "delete",
                "retention.ms": "-1",
                "retention.bytes": "-1",
                "message.timestamp.type": "LogAppendTime",
                "max.message.bytes": str(max_message_bytes(max_document_bytes)),
                **NO_UNCLEAN_ELECTION,
            }
        ),
    )


def changes_topic(
    prefix: str = "tidegraph",
    *,
    partitions: int = DEFAULT_PARTITIONS,
    retention_ms: int | None = None,
) -> TopicSpec:
    """``<prefix>.changes``: the broker's retention unless one is given."""
    configs = {"cleanup.policy": "delete", **NO_UNCLEAN_ELECTION}
    if retention_ms is not None:
        configs["retention.ms"] = str(retention_ms)
    return TopicSpec(
        name=f"{prefix}.changes", partitions=partitions, configs=MappingProxyType(configs)
    )


def dlq_topic(
    prefix: str = "tidegraph",
    *,
    partitions: int = DEFAULT_PARTITIONS,
    max_document_bytes: int = MAX_DOCUMENT_BYTES,
) -> TopicSpec:
    """``<prefix>.documents.dlq``: the original bytes of refused records, kept forever."""
    return TopicSpec(
        name=f"{prefix}.documents.dlq",
        partitions=partitions,
        configs=MappingProxyType(
            {
                "cleanup.policy": "delete",
                "retention.ms": "-1",
                "max.message.bytes": str(max_message_bytes(max_document_bytes)),
                **NO_UNCLEAN_ELECTION,
            }
        ),
    )


def topic_specs(
    prefix: str = "tidegraph",
    *,
    partitions: int = DEFAULT_PARTITIONS,
    max_document_bytes: int = MAX_DOCUMENT_BYTES,
    changes_retention_ms: int | None = None,
) -> tuple[TopicSpec, TopicSpec, TopicSpec]:
    """Documents, changes and DLQ topics, in that order."""
    return (
        documents_topic(prefix, partitions=partitions, max_document_bytes=max_document_bytes),
        changes_topic(prefix, partitions=partitions, retention_ms=changes_retention_ms),
        dlq_topic(prefix, partitions=partitions, max_document_bytes=max_document_bytes),
    )


HEADER_SCHEMA = "tg-schema"
HEADER_DOC_KEY = "tg-doc-key"
HEADER_CONTENT_HASH = "tg-content-hash"
HEADER_ERROR = "tg-error"
HEADER_ERROR_CLASS = "tg-error-class"
HEADER_ORIGIN = "tg-origin"
