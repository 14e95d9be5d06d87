"""The live driver: a Kafka consumer group applying document versions record by record."""

from tidegraph.indexer.consumer.indexer import Indexer, IndexerConfig

__all__ = ["Indexer", "IndexerConfig"]
