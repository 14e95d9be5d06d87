"""tidegraph.connectors."""
