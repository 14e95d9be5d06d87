"""tidegraph.infra."""
