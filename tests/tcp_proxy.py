"""A TCP proxy that injects faults between a client and a real server (tests only).

Point a client at ``proxy.port`` instead of the server's port, then change the link while
traffic flows: :meth:`TcpProxy.delay` adds latency to every chunk either way,
:meth:`TcpProxy.drop` turns the link into a black hole (bytes vanish, new connections are
accepted and never answered, nothing is closed, the way a dead router or a full firewall
behaves), :meth:`TcpProxy.reset` aborts every open connection with a TCP RST, and
:meth:`TcpProxy.heal` restores normal forwarding. Runs on the test's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``target_host:target_port`` with injectable faults."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.latency = 0.0
        self.dropping = False
        self.port = 0
        self.accepted = 0
        self.cut = 0
        """Connections aborted by :meth:`reset` so far."""
        self._server: asyncio.Server | None = None
        self._links: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.reset()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    # --- faults ---------------------------------------------------------------------------------

    def delay(self, seconds: float) -> None:
        """Hold every chunk this long before forwarding it (each direction)."""
        self.latency = seconds

    def drop(self) -> None:
        """Black hole: forward nothing, close nothing."""
        self.dropping = True

    def heal(self) -> None:
        """Forward normally again (connections opened meanwhile stay black holes)."""
        self.dropping = False
        self.latency = 0.0

    def reset(self) -> int:
        """Abort every open connection with an RST on both sides; returns how many."""
        links = list(self._links)
        for client, upstream in links:
            for writer in (client, upstream):
                if writer is not None:
                    _abort(writer)
        self._links.clear()
        self.cut += len(links)
        return len(links)

    # --- plumbing -------------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.dropping:
            link: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None] = (writer, None)
            self._links.add(link)
            self._spawn(self._swallow(reader))
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _abort(writer)
            return
        link = (writer, up_writer)
        self._links.add(link)
        self._spawn(self._pipe(reader, up_writer, link))
        self._spawn(self._pipe(up_reader, writer, link))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _swallow(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError):
            while await reader.read(65536):
                pass

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        link: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None],
    ) -> None:
        try:
            while data := await reader.read(65536):
                if self.latency:
                    await asyncio.sleep(self.latency)
                if self.dropping:
                    continue
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            if link in self._links:
                self._links.discard(link)
                for w in link:
                    if w is not None:
                        w.close()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with SO_LINGER 0, so the peer sees a reset, not an orderly end."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@asynccontextmanager
async def tcp_proxy(host: str, port: int) -> AsyncIterator[TcpProxy]:
    """A started proxy to ``host:port``, stopped afterwards."""
    proxy = TcpProxy(host, port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()
