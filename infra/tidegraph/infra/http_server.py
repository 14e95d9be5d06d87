"""How both HTTP services read requests: bounded in time and size, refused in the contract's shape.

Why not uvicorn as it comes: it starts no timer until a request has been answered, so a
client that sends half a header block, or declares 100 bytes of body and sends 10, holds
its connection (and, for a body, the request's task) for ever; and a request line or header
block over h11's buffer is answered with a plain-text 400 and an immediate close that the
still-sending client sees as a TCP reset. :class:`BoundedH11Protocol` adds:

- a *head* bound: the request line and headers must arrive within ``header_timeout`` of the
  connection opening or of the previous response ending; a connection that sent part of a
  head is answered 408, one that sent nothing is closed;
- a *body* bound: no pause between body bytes longer than ``body_idle_timeout`` and the
  whole body within ``body_timeout`` of its head (pauses the server imposes through flow
  control do not count); then 408 if nothing was answered yet, else the connection closes;
- size bounds answered before h11 sees the bytes: a request line over ``max_url_bytes`` is
  414, a head over ``max_head_bytes`` is 431.

Each refusal is ``{"error": {"code", "message"}}`` with ``Connection: close``, followed by a
lingering close: the server stops writing, reads and discards what the client still sends
(up to ``LINGER_BYTES`` or ``LINGER_SECONDS``), then closes, so the client reads the answer
instead of a reset.
"""

from __future__ import annotations

import asyncio
import http
import time
from typing import Any

import h11
import orjson
import uvicorn
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from uvicorn.protocols.http.h11_impl import H11Protocol

LINGER_SECONDS = 2.0
"""Longest a refused connection keeps reading (and discarding) before it closes."""
LINGER_BYTES = 16 * 1024 * 1024
"""Most a refused connection discards before it closes regardless."""


class HttpLimits(BaseSettings):
    """Read bounds shared by the query and ingest services (``TIDEGRAPH_HTTP_*``)."""

    model_config = SettingsConfigDict(env_prefix="TIDEGRAPH_HTTP_", extra="ignore", frozen=True)

    header_timeout: float = Field(
        10.0, gt=0, description="Seconds a request line and its headers may take to arrive."
    )
    body_idle_timeout: float = Field(
        10.0, gt=0, description="Longest pause, in seconds, between bytes of a request body."
    )
    body_timeout: float = Field(
        120.0, gt=0, description="Seconds a whole request body may take after its headers."
    )
    max_url_bytes: int = Field(
        16 * 1024, ge=1024, description="Longest request line; longer is 414."
    )
    max_head_bytes: int = Field(
        64 * 1024, ge=4096, description="Largest request line plus headers; larger is 431."
    )


class BoundedConfig(uvicorn.Config):
    """A uvicorn configuration whose connections use :class:`BoundedH11Protocol`."""

    def __init__(self, app: Any, *, limits: HttpLimits, **kwargs: Any) -> None:
        self.limits = limits
        super().__init__(
            app,
            http=BoundedH11Protocol,
            h11_max_incomplete_event_size=limits.max_head_bytes + 1024,
            **kwargs,
        )


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with read deadlines and size refusals (see the module doc)."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.limits = config.limits if isinstance(config, BoundedConfig) else HttpLimits()
        self._deadline: asyncio.TimerHandle | None = None
        self._head_pending = True
        self._cycle_seen: object = None
        self._body_started = 0.0
        self._lingering = False
        self._discarded = 0

    # --- connection events ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._discarded += len(data)
            if self._discarded > LINGER_BYTES:
                self.transport.close()
            return
        if self.conn.their_state is h11.IDLE and self._oversized(data):
            return
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        if self._lingering or self.cycle is None:
            return
        if self.cycle is not self._cycle_seen:  # a head was parsed: a new request began
            self._cycle_seen = self.cycle
            self._head_pending = False
            self._body_started = time.monotonic()
            self._disarm()
        if self.cycle.more_body and not self._head_pending:
            self._arm(self._body_deadline(), self._body_expired)
        elif not self.cycle.more_body:
            self._disarm()

    def on_response_complete(self) -> None:
        self._head_pending = True
        if not self.transport.is_closing():
            self._await_head()
        super().on_response_complete()

    # --- bounds ---------------------------------------------------------------------------------

    def _await_head(self) -> None:
        self._arm(time.monotonic() + self.limits.header_timeout, self._head_expired)

    def _body_deadline(self) -> float:
        return min(
            time.monotonic() + self.limits.body_idle_timeout,
            self._body_started + self.limits.body_timeout,
        )

    def _oversized(self, data: bytes) -> bool:
        """Refuse a head over its bounds before h11 sees it; True when refused."""
        pending = bytes(self.conn.trailing_data[0]) + data
        line_end = pending.find(b"\r\n")
        line = len(pending) if line_end < 0 else line_end
        if line > self.limits.max_url_bytes:
            limit = self.limits.max_url_bytes
            self._refuse(414, "uri_too_long", f"request line over {limit} bytes")
            return True
        head_end = pending.find(b"\r\n\r\n")
        head = len(pending) if head_end < 0 else head_end
        if head > self.limits.max_head_bytes:
            self._refuse(
                431,
                "headers_too_large",
                f"request line and headers over {self.limits.max_head_bytes} bytes",
            )
            return True
        return False

    def _head_expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.conn.trailing_data[0]:
            self._refuse(
                408,
                "request_timeout",
                f"request headers incomplete after {self.limits.header_timeout:g}s",
            )
        else:
            self.transport.close()  # idle: nothing to answer

    def _body_expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self.cycle is None or not self.cycle.more_body:
            return
        if self.flow.read_paused:  # the server is not reading: not the client's delay
            self._arm(time.monotonic() + self.limits.body_idle_timeout, self._body_expired)
            return
        if self.cycle.response_started:
            self.cycle.disconnected = True
            self.cycle.message_event.set()
            self.transport.close()
            return
        self._refuse(
            408,
            "request_timeout",
            f"request body incomplete (no byte for {self.limits.body_idle_timeout:g}s "
            f"or over {self.limits.body_timeout:g}s in all)",
        )

    def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer ``status`` in the contract's shape, then close after a lingering read."""
        self._disarm()
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the request's task sees a disconnect
            self.cycle.message_event.set()
        body = orjson.dumps({"error": {"code": code, "message": message}})
        phrase = http.HTTPStatus(status).phrase
        head = (
            f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        ).encode("ascii")
        self.transport.write(head + body)
        self._lingering = True
        self.flow.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._deadline = self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def _arm(self, when: float, callback: Any) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(max(0.0, when - time.monotonic()), callback)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
