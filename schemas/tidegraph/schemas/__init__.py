"""tidegraph.schemas."""
