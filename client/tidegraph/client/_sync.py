"""The synchronous client (``Client``), over ``httpx.Client``: the same calls as
:class:`~tidegraph.client.AsyncClient` (requests and answers come from ``_calls``), with
``subscribe`` over the HTTP feed only (the topic needs asyncio; use the async client)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import date, datetime
from types import TracebackType
from typing import Any

import httpx

from tidegraph.client import _calls as calls
from tidegraph.client._calls import Call, M
from tidegraph.client._config import ClientConfig
from tidegraph.client._errors import ConnectError
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
)


class Client:
    """The query API from blocking code; see :class:`~tidegraph.client.AsyncClient`."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        read_your_writes: bool = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.config = ClientConfig.resolve(
            base_url, api_key, timeout=timeout, retries=retries, backoff=backoff
        )
        self._http = httpx.Client(
            base_url=self.config.base_url,
            headers=self.config.headers(),
            timeout=self.config.timeout,
            transport=transport,
        )
        self.sequences = SeenSequences(read_your_writes)
        """Each realm's highest head sequence seen, required of later reads of it
        (``read_your_writes=False``: not sent)."""

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: Call[M]) -> M:
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    call.method,
                    call.path,
                    params=call.params,
                    json=call.json,
                    headers=self.sequences.headers(call.realm),
                )
            except httpx.TransportError as exc:
                raise ConnectError(f"{call.method} {call.path}: {exc!r}") from exc
            if response.status_code == 503 and attempt < self.config.retries:
                time.sleep(self.config.delay(attempt, response.headers.get("retry-after")))
                attempt += 1
                continue
            self.sequences.observe(call.realm, response)
            return calls.decode(call, response)

    def realms(self) -> RealmsResponse:
        """The realms this key reads, with counts and head sequence."""
        return self._send(calls.realms())

    def query_data(
        self, realm: str, query: str | QueryDataRequest, **options: Any
    ) -> QueryDataResponse:
        """Retrieval without synthesis; ``options`` are :class:`QueryDataRequest` fields."""
        request = (
            query
            if isinstance(query, QueryDataRequest)
            else QueryDataRequest(query=query, **options)
        )
        return self._send(calls.query_data(realm, request))

    def query(self, realm: str, query: str | QueryRequest, **options: Any) -> QueryResponse:
        """Retrieval plus a synthesised answer with references."""
        request = query if isinstance(query, QueryRequest) else QueryRequest(query=query, **options)
        return self._send(calls.query(realm, request))

    def changes(
        self,
        realm: str,
        after_seq: int | None = None,
        *,
        since: datetime | None = None,
        limit: int = 100,
    ) -> ChangesResponse:
        """One page of the change feed (whole commits)."""
        return self._send(calls.changes(realm, after_seq, since, limit))

    def document(
        self,
        realm: str,
        doc_key: str,
        *,
        space: str = "default",
        as_believed_at: datetime | date | str | None = None,
    ) -> DocumentResponse:
        """A document's indexing state (of the version held at ``as_believed_at``)."""
        return self._send(calls.document(realm, doc_key, space, as_believed_at))

    def relations(
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
        return self._send(
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

    def relation_history(self, realm: str, relation_id: int | str) -> RelationHistoryResponse:
        """A relation's belief history: each interval it was believed current or superseded."""
        return self._send(calls.relation_history(realm, relation_id))

    def entities(
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
        return self._send(
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

    def subscribe(
        self,
        realm: str,
        after_seq: int = 0,
        *,
        after_id: str | None = None,
        follow: bool = True,
        poll_interval: float = 1.0,
        page_size: int = 500,
    ) -> Iterator[GraphChange]:
        """Every change of ``realm`` after the caller's position, exactly once, in order,
        from the HTTP feed; see :meth:`AsyncClient.subscribe`."""
        position = Position.after(after_seq, after_id)
        while True:
            page = self.changes(realm, position.page_after_seq, limit=page_size)
            for change in page.changes:
                if position.admits(change):
                    position = Position.of(change)
                    yield change
            position = later(position, Position(page.next_seq))
            if page.next_seq >= page.head_seq:
                if not follow:
                    return
                time.sleep(poll_interval)
