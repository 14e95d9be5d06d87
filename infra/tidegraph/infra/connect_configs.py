"""Connector configurations for the local Kafka Connect worker: what the docs show, as code.

Each function returns the ``PUT /connectors/<name>/config`` body. Secrets are references
into the worker's ``secrets.properties`` (``local_connect.ConnectLayout.secret``), never
values.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import conninfo

from tidegraph.infra.local_connect import STRING_CONVERTER, converters
from tidegraph.schemas import ConfigError


def _topic_creation() -> dict[str, str]:
    """Topics the connector creates: one partition (a table's events stay in commit order
    on one partition), the broker's replication factor."""
    return {
        "topic.creation.default.partitions": "1",
        "topic.creation.default.replication.factor": "-1",
    }


def debezium_postgres(
    *,
    dsn: str,
    password: str,
    tables: Sequence[str],
    topic_prefix: str,
    slot: str,
    schemas: bool = True,
    heartbeat_ms: int = 0,
) -> dict[str, str]:
    """The Debezium PostgreSQL connector over ``pgoutput`` for ``tables`` (``schema.table``).

    ``dsn`` gives host, port, user and database (its password is ignored: ``password`` is
    the secret reference). Truncates are emitted (Debezium skips them by default), decimals
    travel as text, and the slot and publication are named ``slot``.
    """
    parts = conninfo.conninfo_to_dict(dsn)
    missing = [k for k in ("host", "user") if not parts.get(k)]
    if missing:
        raise ConfigError(f"the PostgreSQL DSN for Debezium has no {' or '.join(missing)}")
    if not tables:
        raise ConfigError("name at least one table for Debezium to capture")
    config = {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "database.hostname": str(parts["host"]),
        "database.port": str(parts.get("port") or 5432),
        "database.user": str(parts["user"]),
        "database.password": password,
        "database.dbname": str(parts.get("dbname") or parts["user"]),
        "topic.prefix": topic_prefix,
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "publication.name": slot,
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(_regex_literal(t) for t in tables),
        "snapshot.mode": "initial",
        "skipped.operations": "none",
        "decimal.handling.mode": "string",
        "tombstones.on.delete": "true",
        "provide.transaction.metadata": "true",
        **_topic_creation(),
        **converters(schemas=schemas),
    }
    if heartbeat_ms > 0:
        config["heartbeat.interval.ms"] = str(heartbeat_ms)
    return config


def debezium_mysql(
    *,
    host: str,
    port: int,
    user: str,
    password: str,
    tables: Sequence[str],
    topic_prefix: str,
    server_id: int,
    history_login: dict[str, str],
    bootstrap: str,
    schemas: bool = True,
) -> dict[str, str]:
    """The Debezium MySQL connector for ``tables`` (``database.table``).

    Its schema history lives in a topic of its own (``<topic_prefix>.history``), written by
    Kafka clients the connector makes itself: ``history_login`` gives them the worker's
    login (``local_connect.client_login``).
    """
    config = {
        "connector.class": "io.debezium.connector.mysql.MySqlConnector",
        "tasks.max": "1",
        "database.hostname": host,
        "database.port": str(port),
        "database.user": user,
        "database.password": password,
        "database.server.id": str(server_id),
        "topic.prefix": topic_prefix,
        "database.include.list": ",".join(
            sorted({_regex_literal(t.split(".")[0]) for t in tables})
        ),
        "table.include.list": ",".join(_regex_literal(t) for t in tables),
        "snapshot.mode": "initial",
        "skipped.operations": "none",
        "decimal.handling.mode": "string",
        "schema.history.internal.kafka.bootstrap.servers": bootstrap,
        "schema.history.internal.kafka.topic": f"{topic_prefix}.history",
        **{f"schema.history.internal.producer.{k}": v for k, v in history_login.items()},
        **{f"schema.history.internal.consumer.{k}": v for k, v in history_login.items()},
        **_topic_creation(),
        **converters(schemas=schemas),
    }
    return config


def file_sink(*, topic: str, path: str) -> dict[str, str]:
    """Kafka's ``FileStreamSink``: every record of ``topic``, one line each, in order.

    Values are taken as strings (``StringConverter``): a change is already one line of
    JSON; ``JsonConverter`` would parse it into a map and write the map's Java text.
    """
    return {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "tasks.max": "1",
        "topics": topic,
        "file": path,
        "key.converter": STRING_CONVERTER,
        "value.converter": STRING_CONVERTER,
    }


def _regex_literal(name: str) -> str:
    """Debezium's include lists are regular expressions: match ``name`` exactly."""
    return name.replace(".", "\\.")
