"""The content hash: the one function every connector and the indexer use.

``sha256:`` + 64 lowercase hex digits of the UTF-8 bytes of the content. Connectors stamp it
on each upsert; the indexer recomputes it before trusting a record, and compares it with the
applied hash to skip unchanged documents before paying for extraction.
"""

from __future__ import annotations

import hashlib

CONTENT_HASH_PREFIX = "sha256:"
CONTENT_HASH_PATTERN = r"^sha256:[0-9a-f]{64}$"


def content_hash(content: str) -> str:
    """Hash of ``content`` as the contract defines it.

    Raises ``UnicodeEncodeError`` for text that has no UTF-8 form (lone surrogates), which
    no valid JSON record can carry.
    """
    return CONTENT_HASH_PREFIX + hashlib.sha256(content.encode("utf-8")).hexdigest()
