"""The asynchronous client (``AsyncClient``), over ``httpx.AsyncClient``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import date, datetime
from types import TracebackType
from typing import Any, Protocol

import httpx

from tidegraph.client import _calls as calls
from tidegraph.client._calls import Call, M
from tidegraph.client._config import ClientConfig
from tidegraph.client._errors import ClientError, ConnectError
from tidegraph.client._position import Position, later
from tidegraph.client._sequences import SeenSequences
from tidegraph.schemas import (
    ChangesResponse,
    DocumentResponse,
    EntitiesResponse,
    GraphChange,
    QueryDataRequest,
    QueryDataResponse,
    QueryRequest,
    QueryResponse,
    RealmsResponse,
    RelationHistoryResponse,
    RelationsResponse,
    changes_topic,
)


class AsyncClient:
    """The query API from asyncio code; every method returns the contract's model.

    ``base_url`` and ``api_key`` default to ``TIDEGRAPH_URL`` and ``TIDEGRAPH_API_KEY``. A
    503 answer is retried ``retries`` times with doubling waits; any other error raises its
    :mod:`tidegraph.client` exception at once. Use as ``async with AsyncClient() as tg:``.
    Each realm's highest head sequence seen is sent with later reads of it, so a service
    reading from standbys never answers from one behind what this client saw
    (``read_your_writes=False`` turns it off; ``sequences.require`` raises the floor).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        read_your_writes: bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = ClientConfig.resolve(
            base_url, api_key, timeout=timeout, retries=retries, backoff=backoff
        )
        self._http = httpx.AsyncClient(
            base_url=self.config.base_url,
            headers=self.config.headers(),
            timeout=self.config.timeout,
            transport=transport,
        )
        self.sequences = SeenSequences(read_your_writes)
        """Each realm's highest head sequence seen, required of later reads of it
        (``read_your_writes=False``: not sent)."""

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call[M]) -> M:
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    params=call.params,
                    json=call.json,
                    headers=self.sequences.headers(call.realm),
                )
            except httpx.TransportError as exc:
                raise ConnectError(f"{call.method} {call.path}: {exc!r}") from exc
            if response.status_code == 503 and attempt < self.config.retries:
                await asyncio.sleep(self.config.delay(attempt, response.headers.get("retry-after")))
                attempt += 1
                continue
            self.sequences.observe(call.realm, response)
            return calls.decode(call, response)

    async def realms(self) -> RealmsResponse:
        """The realms this key reads, with counts and head sequence."""
        return await self._send(calls.realms())

    async def query_data(
        self, realm: str, query: str | QueryDataRequest, **options: Any
    ) -> QueryDataResponse:
        """Retrieval without synthesis; ``options`` are :class:`QueryDataRequest` fields."""
        request = (
            query
            if isinstance(query, QueryDataRequest)
            else QueryDataRequest(query=query, **options)
        )
        return await self._send(calls.query_data(realm, request))

    async def query(self, realm: str, query: str | QueryRequest, **options: Any) -> QueryResponse:
        """Retrieval plus a synthesised answer with references."""
        request = query if isinstance(query, QueryRequest) else QueryRequest(query=query, **options)
        return await self._send(calls.query(realm, request))

    async def changes(
        self,
        realm: str,
        after_seq: int | None = None,
        *,
        since: datetime | None = None,
        limit: int = 100,
    ) -> ChangesResponse:
        """One page of the change feed (whole commits)."""
        return await self._send(calls.changes(realm, after_seq, since, limit))

    async def document(
        self,
        realm: str,
        doc_key: str,
        *,
        space: str = "default",
        as_believed_at: datetime | date | str | None = None,
    ) -> DocumentResponse:
        """A document's indexing state (of the version held at ``as_believed_at``)."""
        return await self._send(calls.document(realm, doc_key, space, as_believed_at))

    async def relations(
        self,
        realm: str,
        *,
        subject: str | None = None,
        predicate: str | None = None,
        object: str | None = None,  # noqa: A002 - the API's name
        space: str = "*",
        as_of: date | str | None = None,
        as_believed_at: datetime | date | str | None = None,
        include_superseded: bool = False,
        after_id: int | str = 0,
        limit: int = 100,
    ) -> RelationsResponse:
        """Relations by canonical names and predicate; current ones unless asked."""
        return await self._send(
            calls.relations(
                realm,
                subject=subject,
                predicate=predicate,
                object=object,
                space=space,
                as_of=as_of,
                as_believed_at=as_believed_at,
                include_superseded=include_superseded,
                after_id=after_id,
                limit=limit,
            )
        )

    async def relation_history(self, realm: str, relation_id: int | str) -> RelationHistoryResponse:
        """A relation's belief history: each interval it was believed current or superseded."""
        return await self._send(calls.relation_history(realm, relation_id))

    async def entities(
        self,
        realm: str,
        *,
        name: str | None = None,
        space: str = "*",
        include_dormant: bool = False,
        as_believed_at: datetime | date | str | None = None,
        after_id: int | str = 0,
        limit: int = 100,
    ) -> EntitiesResponse:
        """Entities by canonical name or alias; with ``as_believed_at``, those that existed
        then, with the attributes believed then."""
        return await self._send(
            calls.entities(
                realm,
                name=name,
                space=space,
                include_dormant=include_dormant,
                as_believed_at=as_believed_at,
                after_id=after_id,
                limit=limit,
            )
        )

    async def subscribe(
        self,
        realm: str,
        after_seq: int = 0,
        *,
        after_id: str | None = None,
        bootstrap: str | None = None,
        topic_prefix: str = "tidegraph",
        follow: bool = True,
        poll_interval: float = 1.0,
        page_size: int = 500,
    ) -> AsyncIterator[GraphChange]:
        """Every change of ``realm`` after the caller's position, exactly once, in order.

        The position is ``after_seq`` (commits consumed whole) or ``after_id`` (the id of
        the last change consumed); store either as you go and pass it back to resume (see
        :class:`~tidegraph.client.Position`). With ``bootstrap`` the changes come from the
        ``<topic_prefix>.changes`` topic, otherwise from the HTTP feed, polled every
        ``poll_interval`` seconds once caught up. Without ``follow`` iteration ends once
        caught up.

        The topic is read with the login the ``tidegraph`` commands use: the
        ``TIDEGRAPH_KAFKA_*`` variables, else the env file `tidegraph up` wrote into the
        state folder (``TIDEGRAPH_STATE_DIR``, else found from the working directory); a
        refused or missing login raises :class:`~tidegraph.client.AuthenticationFailed`.
        """
        position = Position.after(after_seq, after_id)
        if bootstrap is not None:
            topic = changes_topic(topic_prefix).name
            topic_changes = _topic_reader()
            async for change in topic_changes(bootstrap, topic, realm, position, follow=follow):
                yield change
            return
        while True:
            page = await self.changes(realm, position.page_after_seq, limit=page_size)
            for change in page.changes:
                if position.admits(change):
                    position = Position.of(change)
                    yield change
            # pages hold whole commits: everything up to next_seq has been seen
            position = later(position, Position(page.next_seq))
            if page.next_seq >= page.head_seq:
                if not follow:
                    return
                await asyncio.sleep(poll_interval)


class _TopicChanges(Protocol):
    def __call__(
        self, bootstrap: str, topic: str, realm: str, position: Position, *, follow: bool
    ) -> AsyncIterator[GraphChange]: ...


def _topic_reader() -> _TopicChanges:
    """The topic path, imported when first used: aiokafka comes with the ``kafka`` extra
    (``pip install 'tidegraph-client[kafka]'``), and the HTTP feed needs none of it."""
    try:
        from tidegraph.client._kafka import topic_changes
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "aiokafka":
            raise
        raise ClientError(
            "reading the changes topic needs aiokafka: pip install 'tidegraph-client[kafka]' "
            "(or leave bootstrap unset to read the HTTP feed)"
        ) from exc
    return topic_changes
