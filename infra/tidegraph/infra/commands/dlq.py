"""``tidegraph dlq list|replay``: see dead-lettered records and publish chosen ones again.

``list`` prints each record of the dead-letter topic with where it sits (``partition:offset``,
what ``replay --at`` takes), its realm and document, where it came from and why it was
dead-lettered. ``replay`` publishes the chosen records onto the documents topic again once
the cause is fixed — each is decoded and its ``content_hash`` checked again first, and one
that still fails is skipped with the reason. Publishing the same version twice is harmless:
the indexer takes the second as a no-op.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from tidegraph.connectors import DeliveryError, DocumentProducer
from tidegraph.infra.dlq import DeadLetter, read_dead_letters, refused_again, replayable
from tidegraph.infra.reach import check_kafka, kafka_unreachable
from tidegraph.schemas import ConfigError, DocumentVersion, Settings, load_settings, validate_realm

REASON_WIDTH = 100


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("dlq", help="list dead-lettered records, publish chosen ones again")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    listed = actions.add_parser(
        "list",
        help="dead-lettered records with error class and reason",
        description="Print the records of the dead-letter topic: partition:offset, when,"
        " realm, doc_key, error class, origin in the documents topic and reason.",
    )
    _choosers(listed, replay=False)
    listed.add_argument("--json", action="store_true", help="print JSON (full reasons)")
    listed.set_defaults(func=_list)
    again = actions.add_parser(
        "replay",
        help="publish chosen dead-lettered records onto the documents topic again",
        description="Publish the chosen records again after fixing their cause; each is"
        " decoded and its content_hash checked again, and skipped with the reason if it"
        " still fails. Choose with --at, --realm, --error-class (combined: all must hold)"
        " or --all.",
    )
    _choosers(again, replay=True)
    again.add_argument("--dry-run", action="store_true", help="say what would be published")
    again.set_defaults(func=_replay)


def _choosers(p: argparse.ArgumentParser, *, replay: bool) -> None:
    p.add_argument("--realm", help="only records of this realm")
    p.add_argument("--error-class", help="only this error class (invalid, hash_mismatch, …)")
    if replay:
        p.add_argument(
            "--at",
            action="append",
            default=[],
            metavar="PARTITION:OFFSET",
            help="the record at this place of the dead-letter topic (repeatable)",
        )
        p.add_argument("--all", action="store_true", help="every dead-lettered record")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (TIDEGRAPH_KAFKA_BOOTSTRAP)")
    p.add_argument("--topic-prefix", help="topic prefix (TIDEGRAPH_TOPIC_PREFIX)")


async def _letters(args: argparse.Namespace, settings: Settings) -> list[DeadLetter]:
    await check_kafka(settings.kafka_bootstrap)
    letters = await read_dead_letters(settings.kafka_bootstrap, settings.dlq_topic)
    realm = validate_realm(args.realm) if args.realm else None
    return [
        d
        for d in letters
        if (realm is None or d.realm == realm)
        and (args.error_class is None or d.error_class == args.error_class)
    ]


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(kafka_bootstrap=args.bootstrap, topic_prefix=args.topic_prefix)


async def _list(args: argparse.Namespace) -> int:
    settings = _settings(args)
    letters = await _letters(args, settings)
    if args.json:
        print(json.dumps([_as_json(d) for d in letters], indent=2))
    else:
        for d in letters:
            reason = d.error if len(d.error) <= REASON_WIDTH else d.error[: REASON_WIDTH - 1] + "…"
            print(
                f"{d.at}  {d.dead_at.isoformat(timespec='seconds')}  realm {d.realm or '-'}"
                f"  doc_key {d.doc_key or '-'}  {d.error_class}  from {d.origin or '-'}: {reason}"
            )
    by_class: dict[str, int] = {}
    for d in letters:
        by_class[d.error_class] = by_class.get(d.error_class, 0) + 1
    classes = ", ".join(f"{n} {c}" for c, n in sorted(by_class.items()))
    print(
        f"{len(letters)} dead-lettered record(s) in {settings.dlq_topic}"
        + (f" ({classes})" if classes else ""),
        file=sys.stderr,
    )
    return 0


def _as_json(d: DeadLetter) -> dict[str, object]:
    return {
        "at": d.at,
        "partition": d.partition,
        "offset": d.offset,
        "dead_at": d.dead_at.isoformat(),
        "realm": d.realm,
        "doc_key": d.doc_key,
        "origin": d.origin,
        "error_class": d.error_class,
        "error": d.error,
    }


def _places(texts: list[str]) -> set[tuple[int, int]]:
    places = set()
    for text in texts:
        partition, sep, offset = text.partition(":")
        if not sep or not partition.isdigit() or not offset.isdigit():
            raise ConfigError(
                f"--at {text!r} is not PARTITION:OFFSET — copy it from `tidegraph dlq list`"
            )
        places.add((int(partition), int(offset)))
    return places


async def _replay(args: argparse.Namespace) -> int:
    places = _places(args.at)
    if not (places or args.realm or args.error_class or args.all):
        raise ConfigError(
            "dlq replay publishes only chosen records — choose with --at PARTITION:OFFSET,"
            " --realm, --error-class or --all (`tidegraph dlq list` shows them)"
        )
    settings = _settings(args)
    letters = await _letters(args, settings)
    chosen = [d for d in letters if not places or (d.partition, d.offset) in places]
    missing = places - {(d.partition, d.offset) for d in chosen}
    if missing:
        shown = ", ".join(f"{p}:{o}" for p, o in sorted(missing))
        raise ConfigError(
            f"no dead-lettered record at {shown} (with the other choices given) — "
            "`tidegraph dlq list` shows where they are"
        )
    ready: list[tuple[DeadLetter, DocumentVersion]] = []
    skipped = 0
    for d in chosen:
        doc = replayable(d)
        if isinstance(doc, str):
            skipped += 1
            print(f"skipped {d.at} (realm {d.realm or '-'}): {doc}", file=sys.stderr)
        else:
            ready.append((d, doc))
    if ready and not args.dry_run:
        await _publish(settings, [doc for _, doc in ready])
    verb = "would publish" if args.dry_run else "published"
    for d, doc in ready:
        warning = refused_again(d)
        print(
            f"{verb} {d.at} again: realm {doc.realm}, doc_key {doc.doc_key!r}"
            + (f" — {warning}" if warning else "")
        )
    print(
        f"{verb} {len(ready)} of {len(chosen)} chosen record(s) onto {settings.documents_topic};"
        f" skipped {skipped}",
        file=sys.stderr,
    )
    return 1 if skipped else 0


async def _publish(settings: Settings, docs: list[DocumentVersion]) -> None:
    producer = DocumentProducer.from_settings(settings)
    try:
        async with producer:
            await asyncio.gather(*[await producer.submit(doc) for doc in docs])
    except DeliveryError as exc:
        raise kafka_unreachable(settings.kafka_bootstrap, exc) from None
