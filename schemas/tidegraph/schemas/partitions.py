"""Which partition a realm's records live on: one rule for every producer and reader.

Every tidegraph topic is keyed by the realm, so all of a realm's records sit on one
partition (DESIGN invariant 1): the one Kafka's default partitioner picks for a keyed record
— murmur2 of the key bytes (seed ``0x9747b28c``), its sign bit cleared, modulo the number of
partitions. The Java client and aiokafka both choose so, which is why a record published by
either is where a tidegraph reader looks for it. Producers, the replay, the client and the
``changes`` tail all ask here.

Pure Python on purpose: the contracts install without a Kafka client.
"""

from __future__ import annotations

_MASK = 0xFFFFFFFF
_M = 0x5BD1E995
_SEED = 0x9747B28C


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data`` as an unsigned integer (``Utils.murmur2``)."""
    h = (_SEED ^ len(data)) & _MASK
    whole = len(data) - len(data) % 4
    for i in range(0, whole, 4):
        k = (int.from_bytes(data[i : i + 4], "little") * _M) & _MASK
        k = ((k ^ (k >> 24)) * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = data[whole:]
    if tail:
        h ^= int.from_bytes(tail, "little")
        h = (h * _M) & _MASK
    h = ((h ^ (h >> 13)) * _M) & _MASK
    return h ^ (h >> 15)


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition, numbered from 0 among ``partitions``, that a record keyed ``key`` is
    published to."""
    if partitions < 1:
        raise ValueError("a topic has at least one partition")
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def realm_partition(realm: str, partitions: int) -> int:
    """The partition that holds every record of ``realm`` (its key is the UTF-8 name)."""
    return partition_for_key(realm.encode(), partitions)
