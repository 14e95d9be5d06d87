"""How every tidegraph Kafka client authenticates: one settings class, one set of options.

``TIDEGRAPH_KAFKA_SECURITY_PROTOCOL`` (``PLAINTEXT``, ``SASL_PLAINTEXT``, ``SSL``,
``SASL_SSL``), ``TIDEGRAPH_KAFKA_SASL_MECHANISM`` (``SCRAM-SHA-256``, ``SCRAM-SHA-512``,
``PLAIN``), ``TIDEGRAPH_KAFKA_SASL_USERNAME``, ``TIDEGRAPH_KAFKA_SASL_PASSWORD`` and
``TIDEGRAPH_KAFKA_SSL_CAFILE`` (a CA bundle; the system's when absent). `tidegraph up` writes
the first four for its local broker (SASL/SCRAM with a generated password) into the env
file every command reads; for a broker elsewhere with TLS and SASL set
``SASL_SSL`` and the rest by hand. Every producer, consumer and admin client is built with
``**KafkaSecurity().client_options()``, so no client connects any other way; every producer
with ``**producer_options()``, which adds how its records are acknowledged.
"""

from __future__ import annotations

import os
import ssl
from typing import Any, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from tidegraph.schemas.local_state import configured

Protocol = Literal["PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"]
Mechanism = Literal["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"]
ENV_KEYS = (
    "TIDEGRAPH_KAFKA_SECURITY_PROTOCOL",
    "TIDEGRAPH_KAFKA_SASL_MECHANISM",
    "TIDEGRAPH_KAFKA_SASL_USERNAME",
    "TIDEGRAPH_KAFKA_SASL_PASSWORD",
)


class KafkaSecurity(BaseSettings):
    """Transport and authentication of Kafka clients (``TIDEGRAPH_KAFKA_*``)."""

    model_config = SettingsConfigDict(env_prefix="TIDEGRAPH_KAFKA_", extra="ignore", frozen=True)

    security_protocol: Protocol = Field("PLAINTEXT", description="Kafka security protocol.")
    sasl_mechanism: Mechanism = Field("SCRAM-SHA-256", description="SASL mechanism.")
    sasl_username: str | None = Field(None, description="SASL user.")
    sasl_password: SecretStr | None = Field(None, description="SASL password.")
    ssl_cafile: str | None = Field(None, description="CA bundle for TLS; the system's if unset.")

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka's producer, consumer, admin and client classes."""
        options: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.security_protocol.startswith("SASL_"):
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.sasl_username
            options["sasl_plain_password"] = (
                self.sasl_password.get_secret_value() if self.sasl_password else None
            )
        if self.security_protocol.endswith("SSL"):
            options["ssl_context"] = ssl.create_default_context(cafile=self.ssl_cafile)
        return options

    def java_properties(self, bootstrap: str) -> list[str]:
        """The same connection as Kafka's own clients take it (``client.properties`` for
        ``kafka-console-consumer.sh --consumer.config``, any Java client)."""
        lines = [f"bootstrap.servers={bootstrap}", f"security.protocol={self.security_protocol}"]
        if self.security_protocol.startswith("SASL_"):
            module = (
                "org.apache.kafka.common.security.plain.PlainLoginModule"
                if self.sasl_mechanism == "PLAIN"
                else "org.apache.kafka.common.security.scram.ScramLoginModule"
            )
            password = self.sasl_password.get_secret_value() if self.sasl_password else ""
            lines += [
                f"sasl.mechanism={self.sasl_mechanism}",
                f"sasl.jaas.config={module} required"
                f' username="{_jaas(self.sasl_username or "")}" password="{_jaas(password)}";',
            ]
        if self.security_protocol.endswith("SSL") and self.ssl_cafile:
            lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={self.ssl_cafile}"]
        return lines

    def env(self) -> dict[str, str]:
        """The variables that reproduce these settings (for the env file)."""
        password = self.sasl_password.get_secret_value() if self.sasl_password else ""
        values = (self.security_protocol, self.sasl_mechanism, self.sasl_username or "", password)
        return {key: value for key, value in zip(ENV_KEYS, values, strict=True) if value}


def kafka_client_options() -> dict[str, Any]:
    """The options of :class:`KafkaSecurity` loaded from the environment now."""
    return KafkaSecurity().client_options()


def configured_security(state_dir: str | os.PathLike[str] | None = None) -> KafkaSecurity:
    """:class:`KafkaSecurity` as a ``tidegraph`` command gets it: the environment, then the
    env file `tidegraph up` wrote (:func:`tidegraph.schemas.local_state.configured`), so a
    program outside the command line logs in to the local broker without sourcing it."""
    values = configured(state_dir)
    given = {
        name: values[f"TIDEGRAPH_KAFKA_{name.upper()}"]
        for name in KafkaSecurity.model_fields
        if f"TIDEGRAPH_KAFKA_{name.upper()}" in values
    }
    return KafkaSecurity.model_validate(given)


def _jaas(value: str) -> str:
    """A JAAS option value inside double quotes (a properties file keeps backslashes as
    escapes too, so they are doubled twice)."""
    return value.replace("\\", "\\\\\\\\").replace('"', '\\\\\\"')


def producer_options() -> dict[str, Any]:
    """:func:`kafka_client_options` plus what every tidegraph producer needs for "acknowledged
    means kept": ``acks=all`` (the leader answers once every in-sync replica, at least the
    topic's ``min.insync.replicas``, holds the record) and idempotence (a batch retried
    after a lost answer or a leader change is written once, in order)."""
    return {**kafka_client_options(), "acks": "all", "enable_idempotence": True}
