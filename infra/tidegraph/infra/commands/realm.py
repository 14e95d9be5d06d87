"""``tidegraph realm create|show|list|copies|delete|telemetry|reindex|move``: pin a realm's
configuration (and server) before its first record, see every realm's size and lag, delete
one, turn its coverage telemetry on or off, rebuild its vector indexes with the current
options, move it to another server."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from tidegraph.infra.placed import command_cluster, on_realm
from tidegraph.infra.reach import check_kafka, check_pg, kafka_unreachable, log_ends
from tidegraph.infra.realm_status import DataStatus, data_status
from tidegraph.infra.runtime import read_realm_config
from tidegraph.infra.tables import aligned
from tidegraph.schemas import (
    MAIN,
    PRESET_NAMES,
    ConfigError,
    GraphChange,
    RealmConfig,
    load_settings,
    preset,
    producer_options,
    realm_schema,
    validate_realm,
    validate_server,
)
from tidegraph.store import (
    DroppedRealm,
    PlacedElsewhere,
    RealmMove,
    RealmSchemaError,
    drop_realm,
    find_placed,
    place_realm,
    realm_copies,
    rebuild_vector_index,
    schema_figures,
    set_coverage_telemetry,
    unregister,
    vector_indexes_outdated,
)


class RealmExistsError(ConfigError):
    """`realm create` of a realm that exists with another configuration."""

    def __init__(self, realm: str, differences: list[str]) -> None:
        super().__init__(
            f"realm {realm!r} exists with another configuration (in force → requested: "
            f"{'; '.join(differences)}) — `tidegraph realm show {realm}` prints the one in "
            "force; change a configuration with `tidegraph replay --realm "
            f"{realm} --config FILE`"
        )
        self.realm = realm
        self.differences = differences


# Long on purpose: the `realm` subcommands' arguments, one block per subcommand, in `--help` order.
def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("realm", help="create, show, list or delete realms")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser(
        "create",
        help="create a realm with a preset or a configuration file",
        description="Create REALM before its first record; its embedder is fixed from then on.",
    )
    create.add_argument("realm")
    create.add_argument("--preset", choices=PRESET_NAMES)
    create.add_argument("--config", type=Path, help="JSON file (CONTRACT 'Realm configuration')")
    create.add_argument(
        "--server",
        help="the PostgreSQL server to place it on, by name (main, or one TIDEGRAPH_PG_SERVERS"
        " names; default: the server holding the fewest realms)",
    )
    create.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    create.set_defaults(func=_create)
    show = actions.add_parser("show", help="print the configuration in force")
    show.add_argument("realm")
    show.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    show.set_defaults(func=_show)
    listed = actions.add_parser(
        "list",
        help="every realm: server, documents, entities, relations, head sequence, embedder, lag",
        description="List realms with their size and the indexer's lag on each (records of"
        " the realm in the documents topic not applied yet).",
    )
    listed.add_argument("--json", action="store_true", help="print JSON")
    listed.add_argument("--group", default="tidegraph-indexer", help="indexer group for the lag")
    listed.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    listed.add_argument("--bootstrap", help="Kafka bootstrap servers (TIDEGRAPH_KAFKA_BOOTSTRAP)")
    listed.add_argument("--topic-prefix", help="topic prefix (TIDEGRAPH_TOPIC_PREFIX)")
    listed.set_defaults(func=_list)
    copies = actions.add_parser(
        "copies",
        help="a realm's shadow, audit and retired copies",
        description="List the copies `replay` made of REALM (shadows, audit copies from"
        " --until, retired schemas) with their size; drop one with"
        " `tidegraph replay --realm R --drop SCHEMA`.",
    )
    copies.add_argument("realm")
    copies.add_argument("--json", action="store_true", help="print JSON")
    copies.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    copies.set_defaults(func=_copies)
    delete = actions.add_parser(
        "delete",
        help="delete a realm: its schema, positions and cache (needs --yes)",
        description="Drop REALM's schema (graph, history, change outbox, extraction cache),"
        " its catalogue entry, publisher position, indexer holds and replay positions, and"
        " publish a `realm_deleted` change. Records published before the deletion stay settled"
        " for every reader; later records of the realm create it again.",
    )
    delete.add_argument("realm")
    delete.add_argument("--yes", action="store_true", help="confirm the deletion")
    delete.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    delete.add_argument("--bootstrap", help="Kafka bootstrap servers (TIDEGRAPH_KAFKA_BOOTSTRAP)")
    delete.add_argument("--topic-prefix", help="topic prefix (TIDEGRAPH_TOPIC_PREFIX)")
    delete.set_defaults(func=_delete)
    telemetry = actions.add_parser(
        "telemetry",
        help="turn coverage telemetry on or off",
        description="Record (on) or stop recording (off) what each query touches: the "
        "query text's hash, entities, communities, time (paper §6.1). Query services "
        "follow within their realm cache interval.",
    )
    telemetry.add_argument("realm")
    telemetry.add_argument("state", choices=("on", "off"))
    telemetry.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    telemetry.set_defaults(func=_telemetry)
    reindex = actions.add_parser(
        "reindex",
        help="rebuild vector indexes built with other HNSW options than the current ones",
        description="Rebuild, one at a time and without blocking writes or queries (CREATE "
        "INDEX CONCURRENTLY beside the old, then a rename), each HNSW index of REALM whose "
        "m / ef_construction differ from those new realms get; --check only lists them "
        "(exit status 1 when any differ).",
    )
    reindex.add_argument("realm")
    reindex.add_argument("--check", action="store_true", help="list, rebuild nothing")
    reindex.add_argument("--pg-dsn", help="PostgreSQL DSN (TIDEGRAPH_PG_DSN)")
    reindex.set_defaults(func=_reindex)
    move = actions.add_parser(
        "move",
        help="move a realm to another PostgreSQL server while it is written and read",
        description="Copy REALM to server --to by logical replication while ingest and"
        " queries go on, then pause its writes, let the copy catch up, switch the catalogue"
        " and fence the old copy (writes wait for the switch, typically well under two"
        " seconds). Run it again to resume a move that was interrupted.",
    )
    move.add_argument("realm")
    move.add_argument("--to", required=True, metavar="SERVER", help="the target server's name")
    move.add_argument(
        "--keep-copy",
        action="store_true",
        help="keep the old copy as an audit copy (realm_<r>__audit_moved_<time>) instead of"
        " dropping it",
    )
    move.add_argument(
        "--grace",
        type=float,
        default=15.0,
        help="seconds between the switch and dropping the old copy, for readers' caches"
        " (default 15)",
    )
    move.add_argument("--pg-dsn", help="PostgreSQL DSN of main (TIDEGRAPH_PG_DSN)")
    move.set_defaults(func=_move)


def _config(args: argparse.Namespace) -> RealmConfig:
    if args.config is not None and args.preset is not None:
        raise ConfigError("give --preset or --config, not both")
    if args.config is not None:
        return read_realm_config(args.config)
    if args.preset is not None:
        return preset(args.preset)
    return RealmConfig()


def _main_dsn(args: argparse.Namespace) -> str:
    return load_settings(pg_dsn=args.pg_dsn).pg_dsn.get_secret_value()


async def _create(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    config = _config(args)
    async with command_cluster(_main_dsn(args)) as cluster:
        found = await find_placed(cluster, realm)
        if found is not None:
            if args.server is not None and found.server != args.server:
                raise PlacedElsewhere(realm, found.server, args.server)
            differences = found.config.differences(config)
            if differences:
                raise RealmExistsError(realm, differences)
            print(
                f"realm {realm} already exists with this configuration on server {found.server}",
                file=sys.stderr,
            )
            return 0
        info, _ = await place_realm(cluster, realm, config, args.server)
    print(f"created realm {realm} ({info.extractor}, {info.embedder}) on server {info.server}")
    return 0


async def _show(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    async with command_cluster(_main_dsn(args)) as cluster, on_realm(cluster, realm) as (_, info):
        sys.stdout.write(info.config.to_json().decode() + "\n")
    return 0


async def _telemetry(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    on = args.state == "on"
    async with (
        command_cluster(_main_dsn(args)) as cluster,
        on_realm(cluster, realm) as (conn, placed),
    ):
        info = await set_coverage_telemetry(conn, realm, on, placed.server)
    print(f"realm {realm}: coverage telemetry {'on' if info.config.coverage_telemetry else 'off'}")
    return 0


async def _reindex(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    async with (
        command_cluster(_main_dsn(args)) as cluster,
        on_realm(cluster, realm) as (conn, info),
    ):
        schema = info.schema
        outdated = await vector_indexes_outdated(conn, schema)
        if args.check or not outdated:
            print(f"realm {realm}: vector indexes to rebuild: {', '.join(outdated) or 'none'}")
            return 1 if outdated and args.check else 0
        for table in outdated:
            await rebuild_vector_index(conn, schema, table)
            print(f"realm {realm}: {table} vector index rebuilt", flush=True)
    return 0


async def _move(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    validate_server(args.to)

    def say(line: str) -> None:
        print(f"realm move: {line}", flush=True)

    async with command_cluster(_main_dsn(args), connections=4) as cluster:
        mover = RealmMove(
            cluster, realm, args.to, keep_copy=args.keep_copy, grace=args.grace, say=say
        )
        outcome = await mover.run()
    print(
        f"moved realm {realm} from {outcome.source} to {outcome.target} in"
        f" {outcome.total_seconds:.1f}s (writes waited {outcome.pause_seconds:.2f}s)"
        + (f"; the old copy is kept as {outcome.kept_copy}" if outcome.kept_copy else "")
    )
    return 0


async def _list(args: argparse.Namespace) -> int:
    settings = load_settings(
        kafka_bootstrap=args.bootstrap, pg_dsn=args.pg_dsn, topic_prefix=args.topic_prefix
    )
    dsn = settings.pg_dsn.get_secret_value()
    await check_pg(dsn)
    data = await data_status(dsn, settings.kafka_bootstrap, settings.documents_topic, args.group)
    lag_known = not any(p.startswith("Kafka") for p in data.problems)
    if args.json:
        print(json.dumps(_listing(data, lag_known, settings.documents_topic), indent=2))
    else:
        print(_table(data, lag_known, settings.documents_topic))
    for problem in data.problems:
        print(f"tidegraph: {problem} — lag unknown", file=sys.stderr)
    return 0


def _listing(data: DataStatus, lag_known: bool, topic: str) -> list[dict[str, object]]:
    return [
        {
            "realm": r.realm,
            "server": r.server,
            "positions": {str(p): o for (t, p), o in sorted(r.positions.items()) if t == topic},
            "documents": r.documents,
            "entities": r.entities,
            "relations": r.relations,
            "head_seq": r.head_seq,
            "embedder": r.embedder,
            "extractor": r.extractor,
            "lag": data.realm_lag(r.realm) if lag_known else None,
        }
        for r in data.realms
    ]


def _table(data: DataStatus, lag_known: bool, topic: str) -> str:
    rows = [
        (
            "REALM",
            "SERVER",
            "DOCUMENTS",
            "ENTITIES",
            "RELATIONS",
            "HEAD SEQ",
            "EMBEDDER",
            "POSITION",
            "LAG",
        )
    ]
    for item in _listing(data, lag_known, topic):
        docs = item["documents"]
        assert isinstance(docs, dict)
        shown = ", ".join(f"{n} {s}" for s, n in sorted(docs.items())) or "0"
        lag = "?" if item["lag"] is None else str(item["lag"])
        stands = item["positions"]
        assert isinstance(stands, dict)
        position = ", ".join(f"{p}:{o}" for p, o in stands.items()) or "-"
        rows.append(
            (
                str(item["realm"]),
                str(item["server"]),
                shown,
                str(item["entities"]),
                str(item["relations"]),
                str(item["head_seq"]),
                str(item["embedder"]),
                position,
                lag,
            )
        )
    if len(rows) == 1:
        return "no realms yet"
    return "\n".join(aligned(rows))


async def _copies(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    found = []
    async with command_cluster(_main_dsn(args)) as cluster:
        # On every server: a deleted realm's copies stay where it was.
        for server in cluster.servers.names:
            async with cluster.connection(server) as conn:
                for copy in await realm_copies(conn, realm):
                    found.append(await schema_figures(conn, realm, copy, server))
    rows = [
        {
            "schema": f.schema,
            "server": f.server,
            "kind": f.schema[len(realm_schema(realm)) + 2 :].split("_", 1)[0],
            "documents": f.documents,
            "entities": f.entities,
            "relations": f.relations,
            "head_seq": f.head_seq,
            "last_write_at": f.last_write_at.isoformat() if f.last_write_at else None,
        }
        for f in found
        if f is not None
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print(f"realm {realm} has no copies")
    for row in rows if not args.json else []:
        docs = row["documents"]
        assert isinstance(docs, dict)
        shown = ", ".join(f"{n} {s}" for s, n in sorted(docs.items())) or "0 documents"
        print(
            f"{row['schema']}  {row['kind']}  server {row['server']}  {shown}"
            f"  {row['entities']} entities"
            f"  {row['relations']} relations  seq {row['head_seq']}"
            f"  last write {row['last_write_at'] or '-'}"
        )
    return 0


async def _delete(args: argparse.Namespace) -> int:
    realm = validate_realm(args.realm)
    settings = load_settings(
        kafka_bootstrap=args.bootstrap, pg_dsn=args.pg_dsn, topic_prefix=args.topic_prefix
    )
    async with (
        command_cluster(settings.pg_dsn.get_secret_value()) as cluster,
        on_realm(cluster, realm) as (conn, info),
    ):
        figures = await schema_figures(conn, realm, info.schema, info.server)
        if not args.yes:
            assert figures is not None
            docs = sum(figures.documents.values())
            raise ConfigError(
                f"realm delete drops realm {realm!r} and everything in it ({docs} documents,"
                f" {figures.entities} entities, {figures.relations} relations,"
                f" its history and cache) — run it again with --yes"
            )
        # The note is published inside the transaction: nothing is dropped unless the change
        # feed says so. Every record published until now stays settled (the log's end).
        await check_kafka(settings.kafka_bootstrap)
        ends = await log_ends(settings.kafka_bootstrap, settings.documents_topic)
        elsewhere = info.server != MAIN
        async with conn.transaction(), cluster.connection() as main:
            dropped = await drop_realm(conn, realm, ends, main if elsewhere else None)
            if dropped is None:
                raise RealmSchemaError(f"realm {realm!r} does not exist")
            await _publish_deleted(settings.kafka_bootstrap, settings.changes_topic, dropped)
        if elsewhere:
            async with cluster.connection() as main:
                await unregister(main, realm)
    print(f"deleted realm {realm} (schema {dropped.schema}, last seq {dropped.head_seq})")
    if dropped.copies:
        print(
            f"kept its copies: {', '.join(dropped.copies)} — drop each with"
            f" `tidegraph replay --realm {realm} --drop NAME`",
            file=sys.stderr,
        )
    return 0


async def _publish_deleted(bootstrap: str, topic: str, dropped: DroppedRealm) -> None:
    seq = dropped.head_seq + 1
    note = GraphChange.model_validate(
        {
            "id": f"{dropped.realm}:{seq}:0",
            "realm": dropped.realm,
            "seq": seq,
            "belief_time": datetime.now(UTC),
            "kind": "realm_deleted",
        }
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        client_id="tidegraph-realm-delete",
        **producer_options(),
    )
    try:
        await producer.start()
        await producer.send_and_wait(topic, note.to_json(), key=dropped.realm.encode())
    except KafkaError as exc:
        raise kafka_unreachable(bootstrap, exc) from None
    finally:
        await producer.stop()
