"""LLMEmbedder against the scripted server: batching, normalisation, the pinned dimension,
and failures that raise instead of falling back."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from prometheus_client import REGISTRY

from tidegraph.indexer.extraction.interfaces import Embedder
from tidegraph.indexer.models.client import LLMClient
from tidegraph.indexer.models.embedder import LLMEmbedder
from tidegraph.indexer.models.errors import (
    EmbeddingDimensionMismatch,
    LLMBadOutput,
    LLMUnavailable,
)
from tidegraph.schemas.errors import ConfigError

from llm_server import Fault, ScriptedLLMServer, fake_embedding

MakeClient = Callable[..., LLMClient]


@pytest.fixture
def realm(unique_name: Callable[[str], str]) -> str:
    return unique_name("r")


def unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


async def test_vectors_are_unit_length_in_input_order(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    embedder = LLMEmbedder(make_llm_client(), dimension=16, realm=realm)
    checked: Embedder = embedder
    assert checked.id == "llm:scripted-embed:16" and checked.dimension == 16
    texts = ["Mara Ellison", "Kestrel", "Mara Ellison"]
    vectors = await embedder.embed(texts)
    assert len(vectors) == 3
    for text, vector in zip(texts, vectors, strict=True):
        assert vector == pytest.approx(unit(fake_embedding(text, 16)))
        assert math.fsum(x * x for x in vector) == pytest.approx(1.0)
    assert vectors[0] == vectors[2]


async def test_batches_of_batch_size(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    embedder = LLMEmbedder(make_llm_client(), dimension=16, realm=realm, batch_size=4)
    texts = [f"text {i}" for i in range(10)]
    vectors = await embedder.embed(texts)
    assert vectors == [pytest.approx(unit(fake_embedding(t, 16))) for t in texts]
    sizes = sorted(len(body["input"]) for _, body in llm_server.requests)
    assert sizes == [2, 4, 4]
    assert await embedder.embed([]) == []
    assert llm_server.calls["embed"] == 3


async def test_dimension_mismatch_fails_loudly(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    llm_server.embed_dim = 8
    embedder = LLMEmbedder(make_llm_client(), dimension=16, realm=realm)
    with pytest.raises(EmbeddingDimensionMismatch) as caught:
        await embedder.embed(["Mara Ellison"])
    error = caught.value
    assert (error.expected, error.got) == (16, 8)
    assert isinstance(error, ConfigError) and not error.retriable
    assert "pinned to 16" in str(error)
    labels = {"realm": realm, "kind": "embed", "error_class": "dimension_mismatch"}
    assert REGISTRY.get_sample_value("tidegraph_model_failures_total", labels) == 1


async def test_requested_dimensions_are_sent_when_asked(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    embedder = LLMEmbedder(make_llm_client(), dimension=12, realm=realm, request_dimensions=True)
    vectors = await embedder.embed(["a"])
    assert len(vectors[0]) == 12 and llm_server.requests[0][1]["dimensions"] == 12


async def test_outage_raises_transient_and_never_falls_back(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    llm_server.outage(30)
    embedder = LLMEmbedder(make_llm_client(deadline=0.3), dimension=16, realm=realm)
    with pytest.raises(LLMUnavailable) as caught:
        await embedder.embed(["a", "b"])
    assert caught.value.retriable and caught.value.kind == "embed"


async def test_transient_failure_is_retried(
    make_llm_client: MakeClient, llm_server: ScriptedLLMServer, realm: str
) -> None:
    llm_server.enqueue(Fault.rate_limited(0.05, route="embed"), Fault.http(500, route="embed"))
    embedder = LLMEmbedder(make_llm_client(), dimension=16, realm=realm)
    assert len(await embedder.embed(["a"])) == 1
    assert llm_server.calls["embed"] == 3


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"object": "list", "data": [{"index": 0, "embedding": [0, 0, 0]}]}', "zero"),
        (b'{"object": "list", "data": []}', "0 vectors for 1 inputs"),
    ],
)
async def test_unusable_vectors_are_bad_output(
    make_llm_client: MakeClient,
    llm_server: ScriptedLLMServer,
    realm: str,
    body: bytes,
    reason: str,
) -> None:
    llm_server.enqueue(Fault.raw_body(body, route="embed"))
    embedder = LLMEmbedder(make_llm_client(), dimension=3, realm=realm)
    with pytest.raises(LLMBadOutput, match=reason):
        await embedder.embed(["a"])
