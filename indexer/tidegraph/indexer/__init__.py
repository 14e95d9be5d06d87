"""tidegraph.indexer."""
