"""A realm's changes read from the ``<prefix>.changes`` topic with aiokafka.

The realm's changes all travel on the partition its key hashes to (the producer's default
partitioner), in commit order; the publisher may repeat changes after a failover, always
as exact same-id repeats of what it sent before. So the partition is read from its start,
and :class:`~tidegraph.client._position.Position` drops everything up to the caller's
position, repeats included. Kafka offsets are not the position: the caller's position is
the only state, and no consumer group commits anything.

The topic keeps changes as long as its retention says; a subscriber that must never miss
one after retention has removed it reads the HTTP feed instead (which holds every change).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.conn import create_conn
from aiokafka.errors import (
    AuthenticationFailedError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from tidegraph.client._errors import AuthenticationFailed, ConnectError, ProtocolError
from tidegraph.client._position import Position
from tidegraph.schemas import (
    GraphChange,
    KafkaSecurity,
    RecordValidationError,
    TopicMissing,
    configured_security,
    realm_partition,
    topic_partitions,
)


async def topic_changes(
    bootstrap: str,
    topic: str,
    realm: str,
    position: Position,
    *,
    follow: bool,
) -> AsyncIterator[GraphChange]:
    """Changes of ``realm`` after ``position``; without ``follow`` it ends at the end of
    the partition as it stood when reading began."""
    security = configured_security()  # as the CLI logs in: environment, then <state>/env
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        client_id="tidegraph-client",
        **security.client_options(),
    )
    try:
        await consumer.start()
    except (KafkaError, OSError) as exc:
        await consumer.stop()
        raise await _why_not(bootstrap, security, exc) from exc
    try:
        try:
            partitions = await topic_partitions(bootstrap, topic, **security.client_options())
        except TopicMissing as exc:
            raise ConnectError(f"{exc} — is `tidegraph serve` publishing?") from exc
        key = realm.encode()
        tp = TopicPartition(topic, realm_partition(realm, len(partitions)))
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        while True:
            if not follow and await consumer.position(tp) >= end:
                return
            batches = await consumer.getmany(tp, timeout_ms=500, max_records=500)
            for record in batches.get(tp, []):
                if record.key != key:
                    continue
                try:
                    change = GraphChange.from_json(record.value)
                except RecordValidationError as exc:
                    raise ProtocolError(
                        f"{topic}/{tp.partition}@{record.offset} is not a GraphChange: {exc}"
                    ) from exc
                if position.admits(change):
                    position = Position.of(change)
                    yield change
    finally:
        await consumer.stop()


_LOGIN = (
    "set TIDEGRAPH_KAFKA_SECURITY_PROTOCOL, _SASL_MECHANISM, _SASL_USERNAME and _SASL_PASSWORD;"
    " for the broker `tidegraph up` runs they are in <state>/env, which the client reads"
    " (TIDEGRAPH_STATE_DIR names the state folder when it is not found from here)"
)


async def _why_not(bootstrap: str, security: KafkaSecurity, exc: BaseException) -> ConnectError:
    """Why bootstrapping failed, asked of the first broker directly: aiokafka reports a
    refused login and a broker that wants one alike, as "Unable to bootstrap"."""
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    try:
        conn = await create_conn(
            host.strip("[]"), int(port), request_timeout_ms=5000, **security.client_options()
        )
    except (
        SaslAuthenticationFailed,
        AuthenticationFailedError,
        UnsupportedSaslMechanismError,
    ) as e:
        user = security.sasl_username or "(none)"
        return AuthenticationFailed(
            f"Kafka at {bootstrap} refused the login of user {user!r}"
            f" ({security.sasl_mechanism}): {e} — {_LOGIN}"
        )
    except (KafkaError, OSError, ValueError):
        return ConnectError(f"Kafka at {bootstrap} is unreachable: {exc}")
    conn.close()
    if not security.security_protocol.startswith("SASL_"):
        return AuthenticationFailed(
            f"Kafka at {bootstrap} accepts connections but closed a"
            f" {security.security_protocol} session without answering: it wants a login"
            f" (SASL) or TLS — {_LOGIN}"
        )
    return ConnectError(f"Kafka at {bootstrap} is unreachable: {exc}")
