"""The live driver: a Kafka consumer group applying document versions record by record."""

from tidegraph.indexer.consumer.indexer import Indexer, IndexerConfig, make_pool

__all__ = [
    "Indexer",
    "IndexerConfig",
    "make_pool",
]
