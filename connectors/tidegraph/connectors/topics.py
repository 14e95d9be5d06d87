"""Create the three topics idempotently; never alter an existing one.

An existing topic whose settings differ from the contract's (retention, timestamp type,
cleanup policy, too small a record limit, partition count) is left as it is and reported:
silently changing retention on a system-of-record topic is not a decision a tool may take.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from tidegraph.connectors.errors import DeliveryError
from tidegraph.schemas.kafka_security import kafka_client_options
from tidegraph.schemas.settings import Settings
from tidegraph.schemas.topics import DEFAULT_PARTITIONS, MAX_DOCUMENT_BYTES, TopicSpec, topic_specs

log = logging.getLogger(__name__)

_TOPIC_ALREADY_EXISTS = 36
_AT_LEAST = frozenset({"max.message.bytes"})
"""Settings where a larger existing value is fine."""


@dataclass
class TopicsReport:
    """What :func:`ensure_topic_specs` found and did."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """One per difference: topic, setting, value found, value wanted."""


async def ensure_topics(
    bootstrap: str,
    settings: Settings,
    *,
    partitions: int = DEFAULT_PARTITIONS,
    max_document_bytes: int = MAX_DOCUMENT_BYTES,
    changes_retention_ms: int | None = None,
) -> list[str]:
    """Create missing topics of ``settings.topic_prefix``; return warnings about existing ones.

    Each warning names the topic, the setting, the value found and the value wanted. The
    warnings are also logged. Raises :class:`DeliveryError` when the broker is unreachable.
    """
    specs = topic_specs(
        settings.topic_prefix,
        partitions=partitions,
        max_document_bytes=max_document_bytes,
        changes_retention_ms=changes_retention_ms,
    )
    return await ensure_topic_specs(bootstrap, specs)


async def ensure_topic_specs(bootstrap: str, specs: Sequence[TopicSpec]) -> list[str]:
    """:func:`ensure_topics` for explicit specs: the warnings about existing topics."""
    return (await topics_report(bootstrap, specs)).warnings


async def topics_report(bootstrap: str, specs: Sequence[TopicSpec]) -> TopicsReport:
    """Create what is missing of ``specs``, compare what exists; never alter a topic."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, client_id="tidegraph-topics", **kafka_client_options()
    )
    try:
        await admin.start()
    except (KafkaError, OSError) as exc:
        await admin.close()
        raise DeliveryError(f"Kafka at {bootstrap} is unreachable: {exc!r}") from exc
    try:
        return await _ensure(admin, specs)
    except KafkaError as exc:
        raise DeliveryError(f"topic administration on {bootstrap} failed: {exc!r}") from exc
    finally:
        await admin.close()


async def _ensure(admin: AIOKafkaAdminClient, specs: Sequence[TopicSpec]) -> TopicsReport:
    report = TopicsReport()
    brokers = len((await admin.describe_cluster())["brokers"])
    existing = set(await admin.list_topics())
    missing = [s for s in specs if s.name not in existing]
    if missing:
        response = await admin.create_topics([_new_topic(s, brokers) for s in missing])
        for err in response.to_object()["topic_errors"]:
            code = err["error_code"]
            if code not in (0, _TOPIC_ALREADY_EXISTS):
                raise DeliveryError(
                    f"creating topic {err['topic']!r} failed: {err['error_message']} "
                    f"(error code {code})",
                    retriable=False,
                )
            if code == 0:
                log.info("created topic %s", err["topic"])
                report.created.append(err["topic"])
            else:
                existing.add(err["topic"])  # created meanwhile, or not yet listed
    if report.created:
        # Callers subscribe to or describe them next: wait (a few seconds at most) until
        # the broker's metadata lists the new topics with their partitions.
        await _partition_counts(admin, report.created)
    present = [s for s in specs if s.name in existing]
    report.existing += [s.name for s in present]
    if present:
        report.warnings = await _differences(admin, present)
    for w in report.warnings:
        log.warning("%s", w)
    return report


async def _partition_counts(
    admin: AIOKafkaAdminClient, names: list[str], attempts: int = 20
) -> dict[str, int]:
    """Partition counts of ``names``; a topic created moments ago may not be described yet.

    A topic the broker still reports with an error or without partitions is asked about
    again for a few seconds, and left out if it never settles: no count beats a wrong one.
    """
    counts: dict[str, int] = {}
    pending = list(names)
    for attempt in range(attempts):
        for t in await admin.describe_topics(pending):
            if t["error_code"] == 0 and t["partitions"]:
                counts[t["topic"]] = len(t["partitions"])
        pending = [n for n in pending if n not in counts]
        if not pending or attempt == attempts - 1:
            break
        await asyncio.sleep(0.25)
    return counts


def _new_topic(spec: TopicSpec, brokers: int) -> NewTopic:
    factor = spec.replication_factor if spec.replication_factor > 0 else min(3, brokers)
    return NewTopic(spec.name, spec.partitions, factor, topic_configs=dict(spec.configs))


async def _differences(admin: AIOKafkaAdminClient, specs: Sequence[TopicSpec]) -> list[str]:
    resources = [ConfigResource(ConfigResourceType.TOPIC, s.name) for s in specs]
    found: dict[str, dict[str, str]] = {}
    for response in await admin.describe_configs(resources):
        for res in response.to_object()["resources"]:
            found[res["resource_name"]] = {
                e["config_names"]: e["config_value"] for e in res["config_entries"]
            }
    partitions = await _partition_counts(admin, [s.name for s in specs])
    warnings = []
    for spec in specs:
        have = found.get(spec.name, {})
        for key, want in spec.configs.items():
            got = have.get(key)
            if got == want:
                continue
            if key in _AT_LEAST and got is not None and got.isdigit() and int(got) >= int(want):
                continue
            warnings.append(
                f"topic {spec.name!r} exists with {key}={got} but tidegraph expects "
                f"{key}={want}{' or more' if key in _AT_LEAST else ''}; left unchanged"
            )
        count = partitions.get(spec.name)
        if count is not None and count != spec.partitions:
            warnings.append(
                f"topic {spec.name!r} exists with {count} partitions, not the configured "
                f"{spec.partitions}; left unchanged"
            )
    return warnings
