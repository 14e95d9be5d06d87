"""Request middleware: a body limit enforced before any parsing, per-route counts and
timings, and the realm read's consistency headers."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tidegraph.query_service.metrics import ServiceMetrics
from tidegraph.query_service.replicas import TICKET, ReadTicket
from tidegraph.query_service.responses import error_response
from tidegraph.schemas import HEAD_SEQUENCE_HEADER, SERVED_BY_HEADER


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` (declared or streamed) with a 422.

    Bodies are read up to the limit before the app sees them (they are small JSON), so an
    oversized stream is refused before any parsing, whatever the framework does with it.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes or declared < 0:
                    await self._refuse(send)
                    return
        if scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        response = error_response(
            422, "request_too_large", f"request body exceeds {self.max_bytes} bytes"
        )
        await send(
            {
                "type": "http.response.start",
                "status": 422,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": bytes(response.body)})


class Observed:
    """Count and time every request by route template (never by raw path)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(scope["method"], route, str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)


class ReadHeaders:
    """Give each request a :class:`ReadTicket` (the required sequence goes in, the node and
    head sequence of a realm read come out), and answer the latter as headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ticket = ReadTicket()
        token = TICKET.set(ticket)

        async def stamped(message: Message) -> None:
            if message["type"] == "http.response.start" and ticket.head_seq is not None:
                headers = list(message.get("headers", []))
                headers.append((HEAD_SEQUENCE_HEADER.lower().encode(), b"%d" % ticket.head_seq))
                if ticket.served_by is not None:
                    headers.append((SERVED_BY_HEADER.lower().encode(), ticket.served_by.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, stamped)
        finally:
            TICKET.reset(token)
