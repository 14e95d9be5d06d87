"""tidegraph.query_service."""
