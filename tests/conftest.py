"""Service fixtures are plugins, one module per service (psycopg's tests/conftest.py shape)."""

pytest_plugins = ["fix_names", "fix_kafka", "fix_pg", "fix_llm"]
