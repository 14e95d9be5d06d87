"""Settings shared by every part: loaded once, typed, passed down.

Precedence is flags > environment (``TIDEGRAPH_*``) > defaults. Nothing reads
``os.environ`` at import time; call :func:`load_settings` from the composition root.
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Connection and topic settings every tidegraph process needs."""

    model_config = SettingsConfigDict(env_prefix="TIDEGRAPH_", extra="ignore")

    kafka_bootstrap: str = Field(
        "127.0.0.1:9092", description="Kafka bootstrap servers, comma separated."
    )
    pg_dsn: SecretStr = Field(
        SecretStr("postgresql://postgres@127.0.0.1:5432/postgres"),
        description="PostgreSQL connection string (libpq URI or key=value).",
    )
    topic_prefix: str = Field("tidegraph", description="Prefix of the three topic names.")
    state_dir: str = Field(".tidegraph", description="Local state folder for `up`/`down`.")

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
