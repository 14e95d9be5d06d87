"""A real uvicorn serving an ASGI app on a free loopback port, from a thread of its own.

Property-based runs (schemathesis) call the server synchronously, so it cannot share the
test's event loop; the app is built inside the thread's loop, so that connection pools and
Kafka producers belong to the loop that uses them.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from typing import Any

import uvicorn

Build = Callable[[AsyncExitStack], Awaitable[Any]]
"""Builds the ASGI app, entering what it needs closed afterwards into the exit stack."""


class _Server(threading.Thread):
    def __init__(self, build: Build, port: int) -> None:
        super().__init__(daemon=True)
        self.build = build
        self.port = port
        self.ready = threading.Event()
        self.server: uvicorn.Server | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            self.error = exc
            self.ready.set()

    async def _main(self) -> None:
        async with AsyncExitStack() as stack:
            app = await self.build(stack)
            config = uvicorn.Config(
                app,
                host="127.0.0.1",
                port=self.port,
                lifespan="off",
                log_level="warning",
                access_log=False,
            )
            self.server = uvicorn.Server(config)
            self.server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
            serving = asyncio.create_task(self.server.serve())
            while not self.server.started:
                if serving.done():
                    await serving
                await asyncio.sleep(0.02)
            self.ready.set()
            await serving


@contextmanager
def served(build: Build) -> Iterator[str]:
    """The base URL of the app ``build`` makes, served until the block ends."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = _Server(build, port)
    server.start()
    assert server.ready.wait(60), "server did not start"
    if server.error is not None:
        raise server.error
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        assert server.server is not None
        server.server.should_exit = True
        server.join(30)
