"""Label and field selector parsing and matching (Kubernetes grammar)."""

from __future__ import annotations

import pytest

from nodus.apimachinery.selectors import (
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)

LABELS = {"app": "train", "tier": "gpu", "size": "8"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        pytest.param("", True, id="empty-matches-all"),
        pytest.param("app=train", True, id="equals"),
        pytest.param("app==train", True, id="double-equals"),
        pytest.param("app!=train", False, id="not-equals"),
        pytest.param("missing!=x", True, id="not-equals-missing-key"),
        pytest.param("tier in (cpu, gpu)", True, id="in-with-spaces"),
        pytest.param("tier notin (gpu)", False, id="notin"),
        pytest.param("missing notin (gpu)", True, id="notin-missing-key"),
        pytest.param("app", True, id="exists"),
        pytest.param("!app", False, id="does-not-exist"),
        pytest.param("size>4,size<9", True, id="numeric-range"),
        pytest.param("app=train,tier=cpu", False, id="all-must-hold"),
        pytest.param("example.com/team=x", False, id="prefixed-key"),
        pytest.param("app=", False, id="empty-value"),
    ],
)
def test_label_selector_matching(selector: str, matches: bool) -> None:
    assert parse_label_selector(selector).matches(LABELS) is matches


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param("app in (a", id="unclosed-set"),
        pytest.param("app in a", id="set-without-parens"),
        pytest.param("-bad=x", id="bad-key"),
        pytest.param("app=b@d", id="bad-value"),
        pytest.param("app=x,", id="trailing-comma"),
        pytest.param("size>x", id="non-integer-bound"),
        pytest.param("app ~ x", id="unknown-operator"),
    ],
)
def test_label_selector_errors_say_what_is_wrong(selector: str) -> None:
    with pytest.raises(SelectorError) as excinfo:
        parse_label_selector(selector)
    assert repr(selector) in str(excinfo.value), "the message quotes the selector it refuses"


def test_label_selector_round_trips_to_text() -> None:
    text = "app=train,tier in (cpu,gpu),!gone,size>4"
    assert str(parse_label_selector(text)) == text


def test_field_selectors() -> None:
    fields = ("metadata.name", "metadata.namespace", "status.phase")
    selector = parse_field_selector("metadata.name=a,status.phase!=Running", fields)
    assert selector.matches({"metadata.name": "a", "status.phase": "Queued"})
    assert not selector.matches({"metadata.name": "a", "status.phase": "Running"})
    assert parse_field_selector(r"metadata.name=a\,b", fields).matches({"metadata.name": "a,b"})
    with pytest.raises(SelectorError, match=r"field label not supported: spec\.image"):
        parse_field_selector("spec.image=x", fields)
    with pytest.raises(SelectorError):
        parse_field_selector("metadata.name", fields)
