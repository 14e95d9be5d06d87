"""One key syntax and one loopback rule for every HTTP surface (tidegraph.schemas.api_keys)."""

from __future__ import annotations

import pytest

from tidegraph.schemas.api_keys import ApiKeys, bearer_token, is_loopback, require_loopback
from tidegraph.schemas.errors import ConfigError


def test_keys_parse_into_grants() -> None:
    keys = ApiKeys.parse(" k1 = a , b ; k2=* ;")
    assert [(g.key, sorted(g.realms)) for g in keys.grants] == [("k1", ["a", "b"]), ("k2", ["*"])]
    k1, k2 = keys.grant_of("k1"), keys.grant_of("k2")
    assert k1 is not None and k1.allows("b") and not k1.allows("c")
    assert k2 is not None and k2.allows("anything")
    assert keys.grant_of("nope") is None
    assert not ApiKeys.parse(None).enabled and not ApiKeys.parse(" ; ").enabled


@pytest.mark.parametrize("bad", ["key1", "=a", "key1=", "key1=Bad-Name", "key1=a;key1=b"])
def test_bad_entries_are_refused_without_echoing_the_key(bad: str) -> None:
    with pytest.raises(ConfigError, match="TIDEGRAPH_API_KEYS") as info:
        ApiKeys.parse(bad)
    assert "key1" not in str(info.value)


def test_bearer_header_forms() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None


def test_loopback_rule() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("[::1]")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback(None)
    with pytest.raises(ConfigError, match="TIDEGRAPH_API_KEYS"):
        require_loopback("0.0.0.0", ApiKeys())
    require_loopback("0.0.0.0", ApiKeys.parse("k=*"))
    require_loopback("127.0.0.1", ApiKeys())
