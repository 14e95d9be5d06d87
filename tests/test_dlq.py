"""`dlq list` shows dead-lettered records with class and reason; `dlq replay` publishes
chosen ones again, checking each again first."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tidegraph.infra.dlq import read_dead_letters
from tidegraph.schemas import TopicMissing, topic_ready
from tidegraph.schemas.documents import DocumentVersion
from tidegraph.schemas.errors import RecordValidationError
from tidegraph.schemas.kafka_security import kafka_client_options

from indexer_helpers import (
    Topics,
    make_topics,
    publish,
    running_indexer,
    stored_position,
    upsert,
    wait_for,
)
from local_services import env_without_settings, run_cli

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]


async def _documents(topics: Topics) -> list[DocumentVersion]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=topics.bootstrap, enable_auto_commit=False, **kafka_client_options()
    )
    await consumer.start()
    try:
        tp = TopicPartition(topics.documents, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out = []
        while await consumer.position(tp) < end:
            for records in (await consumer.getmany(tp, timeout_ms=1000)).values():
                out.extend(records)
        docs = []
        for record in out:
            try:
                docs.append(DocumentVersion.from_json(record.value or b""))
            except RecordValidationError:
                pass  # the malformed record published on purpose
        return docs
    finally:
        await consumer.stop()


async def test_dlq_list_and_replay(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topics = await make_topics(kafka_bootstrap, unique_name("t"), partitions=1)
    realm, group = unique_name("r"), unique_name("g")
    env = env_without_settings(
        TIDEGRAPH_KAFKA_BOOTSTRAP=kafka_bootstrap,
        TIDEGRAPH_TOPIC_PREFIX=topics.prefix,
        TIDEGRAPH_STATE_DIR=str(tmp_path / "state"),
    )
    tampered = upsert(realm, "tampered.md", "Ada Lovelace worked with Charles Babbage.")
    tampered = tampered.model_copy(update={"content_hash": "sha256:" + "0" * 64})
    async with running_indexer(topics, pg_dsn, group):
        await publish(
            topics,
            [
                (realm.encode(), b"{not json"),
                tampered,
                upsert(realm, "ok.md", "Grace Hopper worked with Howard Aiken."),
            ],
        )

        async def done() -> bool:
            return await stored_position(pg_dsn, group, topics.documents) >= 3

        await wait_for(done, 60, "all three settled")
    # A record dead-lettered by an older release for a cause fixed since: valid as it is.
    fixed = upsert(realm, "fixed.md", "Alan Turing worked with Max Newman.")
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, **kafka_client_options())
    await producer.start()
    try:
        await producer.send_and_wait(
            topics.dlq,
            fixed.to_json(),
            key=realm.encode(),
            headers=[
                ("tg-error", b"a bug since fixed"),
                ("tg-error-class", b"unstorable"),
                ("tg-origin", f"{topics.documents}/0/99".encode()),
            ],
        )
    finally:
        await producer.stop()

    listed = run_cli(["dlq", "list", "--json"], env)
    assert listed.returncode == 0, listed.stderr
    letters = json.loads(listed.stdout)
    assert [(d["error_class"], d["realm"], d["doc_key"]) for d in letters] == [
        ("invalid", realm, None),
        ("hash_mismatch", realm, "tampered.md"),
        ("unstorable", realm, "fixed.md"),
    ]
    assert (
        letters[0]["origin"] == f"{topics.documents}/0/0"
        and "malformed JSON" in letters[0]["error"]
    )
    assert "does not match" in letters[1]["error"]
    assert "3 dead-lettered record(s)" in listed.stderr
    text = run_cli(["dlq", "list", "--error-class", "hash_mismatch"], env)
    [line] = text.stdout.splitlines()
    assert line.startswith(f"{letters[1]['at']}  ") and "doc_key tampered.md" in line
    assert json.loads(run_cli(["dlq", "list", "--json", "--realm", "nosuch"], env).stdout) == []

    nothing = run_cli(["dlq", "replay"], env)
    assert nothing.returncode != 0 and "Traceback" not in nothing.stderr
    assert nothing.stderr.startswith("tidegraph: dlq replay publishes only chosen records — ")
    before = await _documents(topics)

    # Checked again: the two still broken are skipped with their reason, the fixed one goes.
    again = run_cli(["dlq", "replay", "--all"], env)
    assert again.returncode == 1, again.stderr
    assert "still not a valid document" in again.stderr
    assert "content_hash sha256:000" in again.stderr and "still does not match" in again.stderr
    assert f"published {letters[2]['at']} again: realm {realm}, doc_key 'fixed.md'" in again.stdout
    after = await _documents(topics)
    assert [d.doc_key for d in after[len(before) :]] == ["fixed.md"]
    assert after[-1].content == fixed.content and after[-1].hash_matches()

    one = run_cli(["dlq", "replay", "--at", letters[2]["at"], "--dry-run"], env)
    assert one.returncode == 0 and "would publish 1 of 1" in one.stderr
    # an unstorable record's bytes meet the same refusal unless its cause went away: said
    assert "dead-lettered as unstorable (a bug since fixed)" in one.stdout
    assert "refuses the same value again" in one.stdout
    bad = run_cli(["dlq", "replay", "--at", "0:12345"], env)
    assert bad.returncode != 0 and "no dead-lettered record at 0:12345" in bad.stderr


@pytest.mark.kafka
async def test_reading_a_dead_letter_topic_that_does_not_exist_names_it(
    kafka_bootstrap: str, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No topic is not "no dead letters": the reader waits its budget, then says which
    topic is missing (it used to answer an empty list)."""
    monkeypatch.setattr(topic_ready, "TOPIC_WAIT_SECONDS", 1.0)
    topic = unique_name("nodlq") + ".documents.dlq"
    with pytest.raises(TopicMissing, match=topic):
        await read_dead_letters(kafka_bootstrap, topic)
