"""A subscriber process for the kill-and-restart test: appends each change id it receives
to OUT, one line per change, and resumes after the last complete line when restarted.

The file is the caller-held position: a line is written in one ``write`` call after the
change is handled, so a SIGKILL leaves at most a torn last line, which a restart drops.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from tidegraph.client import AsyncClient


def resume_from(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    whole = data[: data.rfind(b"\n") + 1]
    if whole != data:
        with open(path, "r+b") as f:
            f.truncate(len(whole))
    lines = whole.decode().splitlines()
    return lines[-1] if lines else None


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--realm", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--bootstrap")
    p.add_argument("--prefix", default="tidegraph")
    p.add_argument("--delay", type=float, default=0.02)
    args = p.parse_args()
    after = resume_from(args.out)
    fd = os.open(args.out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    async with AsyncClient(args.url) as tg:
        async for change in tg.subscribe(
            args.realm,
            after_id=after,
            bootstrap=args.bootstrap,
            topic_prefix=args.prefix,
            poll_interval=0.1,
            page_size=7,
        ):
            os.write(fd, f"{change.id}\n".encode())
            await asyncio.sleep(args.delay)


if __name__ == "__main__":
    asyncio.run(main())
