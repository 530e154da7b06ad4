"""What every explanation's tests check of its result: the one result protocol."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

import regimes
from regimes._result import AnalysisResult


def _check(result: Any, cls: type, old_name: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"regimes\.{old_name} is renamed.*removed in"):
        assert getattr(regimes, old_name) is cls
    assert isinstance(result, cls) and isinstance(result, AnalysisResult)
    assert cls.__name__.endswith("Result")
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.params = {}
    text = repr(result)
    assert text.startswith(f"{cls.__name__}(") and "\n" not in text and len(text) < 200
    assert result.status == "tested" and result.untested.height == 0
    exported = json.loads(result.to_json())
    assert exported["result"] == cls.__name__ and exported["untested"] == []
    assert {"x", "y", "by"} <= set(result.params)
    assert "<table>" in result._repr_html_()
    assert result.summary()


@pytest.fixture
def result_protocol() -> Callable[[Any, type, type], None]:
    """Assert that a result follows the protocol (frozen, short repr, JSON, params)."""
    return _check
