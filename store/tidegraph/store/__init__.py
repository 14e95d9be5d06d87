"""tidegraph.store: the SQL every package shares — the realm catalogue, layout locks and
upgrades, consumer positions, and which PostgreSQL errors are worth retrying."""
