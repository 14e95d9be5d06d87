"""Reading a browser's PNG screenshot into pixels, without an imaging library: the explorer
test compares what was drawn with what it expects.

Chromium writes 8-bit RGB or RGBA, non-interlaced PNGs; that is all this reads.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Pixels:
    width: int
    height: int
    channels: int
    rows: list[bytes]

    def rgb(self, x: int, y: int) -> tuple[int, int, int]:
        i = x * self.channels
        row = self.rows[y]
        return row[i], row[i + 1], row[i + 2]


def decode(png: bytes) -> Pixels:
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    at, idat = 8, bytearray()
    width = height = channels = 0
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, body = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        at += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    raw = zlib.decompress(bytes(idat))
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        _unfilter(kind, line, previous, channels)
        rows.append(bytes(line))
        previous = line
    return Pixels(width, height, channels, rows)


def _unfilter(kind: int, line: bytearray, up: bytearray, bpp: int) -> None:
    if kind == 0:
        return
    if kind == 2:
        for i in range(len(line)):
            line[i] = (line[i] + up[i]) & 0xFF
        return
    for i in range(len(line)):
        left = line[i - bpp] if i >= bpp else 0
        if kind == 1:
            line[i] = (line[i] + left) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + ((left + up[i]) >> 1)) & 0xFF
        elif kind == 4:
            corner = up[i - bpp] if i >= bpp else 0
            p = left + up[i] - corner
            pa, pb, pc = abs(p - left), abs(p - up[i]), abs(p - corner)
            near = left if pa <= pb and pa <= pc else up[i] if pb <= pc else corner
            line[i] = (line[i] + near) & 0xFF
        else:
            raise ValueError(f"PNG filter {kind}")


def inked_extent(
    pixels: Pixels, background: tuple[int, int, int], *, skip_bottom: int = 0
) -> tuple[float, float]:
    """The share of the width and of the height between the first and last pixel that is not
    ``background`` (a drawing spread over the picture covers most of both), above the last
    ``skip_bottom`` rows."""
    xs: list[int] = []
    ys: list[int] = []
    for y in range(0, pixels.height - skip_bottom, 2):
        for x in range(0, pixels.width, 2):
            if max(abs(a - b) for a, b in zip(pixels.rgb(x, y), background, strict=True)) > 60:
                xs.append(x)
                ys.append(y)
    if not xs:
        return 0.0, 0.0
    return (max(xs) - min(xs)) / pixels.width, (max(ys) - min(ys)) / pixels.height


def changed_share(a: Pixels, b: Pixels) -> float:
    """The share of pixels (sampled every other row and column) that differ."""
    assert (a.width, a.height) == (b.width, b.height)
    seen = differ = 0
    for y in range(0, a.height, 2):
        for x in range(0, a.width, 2):
            seen += 1
            differ += a.rgb(x, y) != b.rgb(x, y)
    return differ / seen
