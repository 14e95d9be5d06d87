"""What a record means for a realm's graph (no-op, stale, apply, delete), decided before any
extraction cost is paid."""
