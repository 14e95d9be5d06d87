"""Settings shared by every part: loaded once, typed, passed down.

Precedence is flags > environment (``TIDEGRAPH_*``) > defaults. Nothing reads
``os.environ`` at import time; call :func:`load_settings` from the composition root.
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

LOOPBACK = "127.0.0.1"
DEFAULT_KAFKA_PORT = 9092
DEFAULT_PG_PORT = 54329


def local_bootstrap(port: int) -> str:
    """The bootstrap address of a broker `tidegraph up` runs on ``port``."""
    return f"{LOOPBACK}:{port}"


def local_dsn(port: int) -> str:
    """The DSN of a server `tidegraph up` runs on ``port``."""
    return f"postgresql://postgres@{LOOPBACK}:{port}/postgres"


class Settings(BaseSettings):
    """Connection and topic settings every tidegraph process needs.

    The addresses default to what `tidegraph up` runs (``TIDEGRAPH_KAFKA_PORT`` and
    ``TIDEGRAPH_PG_PORT`` move both the services and these defaults), so a command never
    looks for a server on a port `up` does not use.
    """

    model_config = SettingsConfigDict(env_prefix="TIDEGRAPH_", extra="ignore")

    kafka_port: int = Field(
        DEFAULT_KAFKA_PORT,
        ge=1,
        le=65535,
        description="Port of the local broker `up` runs; the default bootstrap is 127.0.0.1:<it>.",
    )
    pg_port: int = Field(
        DEFAULT_PG_PORT,
        ge=1,
        le=65535,
        description="Port of the local server `up` runs; the default DSN points at it.",
    )
    kafka_bootstrap: str = Field(
        default_factory=lambda data: local_bootstrap(data.get("kafka_port", DEFAULT_KAFKA_PORT)),
        description="Kafka bootstrap servers, comma separated (default: the local broker).",
    )
    pg_dsn: SecretStr = Field(
        default_factory=lambda data: SecretStr(local_dsn(data.get("pg_port", DEFAULT_PG_PORT))),
        description="PostgreSQL connection string, libpq URI or key=value (default: the "
        "local server).",
    )
    topic_prefix: str = Field("tidegraph", description="Prefix of the three topic names.")
    state_dir: str | None = Field(
        None,
        description="Local state folder of `up`/`down` (default: the nearest `.tidegraph/` "
        "upwards from the working directory, else a per-user folder).",
    )

    @property
    def documents_topic(self) -> str:
        return f"{self.topic_prefix}.documents"

    @property
    def changes_topic(self) -> str:
        return f"{self.topic_prefix}.changes"

    @property
    def dlq_topic(self) -> str:
        return f"{self.topic_prefix}.documents.dlq"


def load_settings(**overrides: object) -> Settings:
    """Build settings from the environment with explicit (flag) overrides on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})  # type: ignore[arg-type]
