"""Create the three topics idempotently; never alter an existing one.

An existing topic whose settings differ from the contract's (retention, timestamp type,
cleanup policy, too small a record limit, partition count, fewer copies or fewer in sync
than tidegraph would create it with) is left as it is and reported:
silently changing retention on a system-of-record topic is not a decision a tool may take.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from tidegraph.connectors.errors import DeliveryError
from tidegraph.schemas import (
    DEFAULT_PARTITIONS,
    MAX_DOCUMENT_BYTES,
    Replication,
    Settings,
    TopicSpec,
    kafka_client_options,
    replication,
    topic_specs,
)

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
        await _partitions(admin, report.created)
    present = [s for s in specs if s.name in existing]
    report.existing += [s.name for s in present]
    if present:
        report.warnings = await _differences(admin, present, replication(brokers))
    for w in report.warnings:
        log.warning("%s", w)
    return report


async def _partitions(
    admin: AIOKafkaAdminClient, names: list[str], attempts: int = 20
) -> dict[str, list[dict[str, Any]]]:
    """The partitions of ``names`` as described (each with its ``replicas``); a topic
    created moments ago may not be described yet.

    A topic the broker still reports with an error or without partitions is asked about
    again for a few seconds, and left out if it never settles: no count beats a wrong one.
    """
    found: dict[str, list[dict[str, Any]]] = {}
    pending = list(names)
    for attempt in range(attempts):
        for t in await admin.describe_topics(pending):
            if t["error_code"] == 0 and t["partitions"]:
                found[t["topic"]] = list(t["partitions"])
        pending = [n for n in pending if n not in found]
        if not pending or attempt == attempts - 1:
            break
        await asyncio.sleep(0.25)
    return found


def _new_topic(spec: TopicSpec, brokers: int) -> NewTopic:
    """Three copies with two in sync on a cluster of three brokers or more
    (:func:`~tidegraph.schemas.topics.replication`); ``min.insync.replicas`` is set on the
    topic itself, so "acknowledged" means what it says whatever the broker's default."""
    wanted = Replication(spec.replication_factor) if spec.replication_factor > 0 else None
    chosen = wanted or replication(brokers)
    configs = {"min.insync.replicas": str(chosen.min_insync), **spec.configs}
    return NewTopic(spec.name, spec.partitions, chosen.factor, topic_configs=configs)


async def _differences(
    admin: AIOKafkaAdminClient, specs: Sequence[TopicSpec], wanted: Replication
) -> list[str]:
    resources = [ConfigResource(ConfigResourceType.TOPIC, s.name) for s in specs]
    found: dict[str, dict[str, str]] = {}
    for response in await admin.describe_configs(resources):
        for res in response.to_object()["resources"]:
            found[res["resource_name"]] = {
                e["config_names"]: e["config_value"] for e in res["config_entries"]
            }
    described = await _partitions(admin, [s.name for s in specs])
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
        partitions = described.get(spec.name)
        if partitions is not None and len(partitions) != spec.partitions:
            warnings.append(
                f"topic {spec.name!r} exists with {len(partitions)} partitions, not the "
                f"configured {spec.partitions}; left unchanged"
            )
        if partitions is not None:
            warnings += _replication_differences(spec.name, partitions, have, wanted)
    return warnings


def _replication_differences(
    name: str, partitions: list[dict[str, Any]], configs: dict[str, str], wanted: Replication
) -> list[str]:
    """Fewer copies than tidegraph would create on this cluster, or fewer in sync than its
    copies call for: an acknowledged record could be lost with one broker."""
    have = Replication(min(len(p["replicas"]) for p in partitions))
    found: list[str] = []
    if have.factor < wanted.factor:
        found.append(
            f"topic {name!r} exists with replication factor {have.factor} but tidegraph "
            f"creates it with {wanted.factor} on this cluster; left unchanged"
        )
    insync = configs.get("min.insync.replicas")
    if insync is not None and insync.isdigit() and int(insync) < have.min_insync:
        found.append(
            f"topic {name!r} exists with min.insync.replicas={insync} but tidegraph expects "
            f"min.insync.replicas={have.min_insync} for {have.factor} copies; left unchanged"
        )
    return found
