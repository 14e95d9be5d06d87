"""Communities: detection over the current graph, their reports, and their storage (paper §6)."""
