"""tidegraph.query_service: the HTTP query API over realm graphs, and the change publisher.

Imports only ``tidegraph.schemas``; embedders and the chat model are injected by the
composition root (``tidegraph serve``).
"""

from tidegraph.query_service.app import Deps, create_app
from tidegraph.query_service.config import QuerySettings, load_query_settings
from tidegraph.query_service.embedding import EmbedderFactory, QueryEmbedder
from tidegraph.query_service.errors import QueryServiceError
from tidegraph.query_service.keywords import KeywordModel, Keywords
from tidegraph.query_service.publisher import ChangePublisher, ChangeSink, KafkaChangeSink
from tidegraph.query_service.rerank_endpoint import RerankEndpoint, Reranker, RerankSettings
from tidegraph.query_service.retrieval import (
    MODES,
    RetrievalLimits,
    RetrievalParams,
    retrieve,
)
from tidegraph.query_service.synthesis import ChatModel, Prompt, build_prompt

__all__ = [
    "MODES",
    "ChangePublisher",
    "ChangeSink",
    "ChatModel",
    "Deps",
    "EmbedderFactory",
    "KafkaChangeSink",
    "KeywordModel",
    "Keywords",
    "Prompt",
    "QueryEmbedder",
    "QueryServiceError",
    "QuerySettings",
    "RerankEndpoint",
    "RerankSettings",
    "Reranker",
    "RetrievalLimits",
    "RetrievalParams",
    "build_prompt",
    "create_app",
    "load_query_settings",
    "retrieve",
]
