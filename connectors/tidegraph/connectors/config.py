"""Settings only the connectors use, loaded once and passed down like the shared ones.

``TIDEGRAPH_MAX_DOCUMENT_BYTES``, ``TIDEGRAPH_MAX_BATCH_BYTES``, ``TIDEGRAPH_API_KEYS``,
``TIDEGRAPH_SEND_TIMEOUT`` and ``TIDEGRAPH_PG_REPLICATION_DSN``;
flags override them (precedence flags > environment > defaults).
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from tidegraph.schemas import MAX_DOCUMENT_BYTES


class ConnectorSettings(BaseSettings):
    """Limits and credentials of the connectors."""

    model_config = SettingsConfigDict(env_prefix="TIDEGRAPH_", extra="ignore")

    max_document_bytes: int = Field(
        MAX_DOCUMENT_BYTES,
        gt=0,
        description="Largest encoded document accepted.",
    )
    max_batch_bytes: int = Field(
        64 * 1024 * 1024, gt=0, description="Largest HTTP ingest batch request body."
    )
    api_keys: SecretStr | None = Field(
        None, description="HTTP ingest keys: `key1=realm_a,realm_b;key2=*`."
    )
    send_timeout: float = Field(
        10.0, gt=0, description="Seconds an HTTP request waits for the Kafka acknowledgement."
    )
    pg_replication_dsn: SecretStr | None = Field(
        None,
        description="DSN the PostgreSQL connector uses when `--dsn` is not given: a role "
        "with REPLICATION (`up` writes the local server's `tidegraph_cdc`); else "
        "`TIDEGRAPH_PG_DSN`.",
    )


def load_connector_settings(**overrides: object) -> ConnectorSettings:
    """Environment with explicit (flag) overrides on top; ``None`` overrides are ignored."""
    return ConnectorSettings(**{k: v for k, v in overrides.items() if v is not None})  # type: ignore[arg-type]
