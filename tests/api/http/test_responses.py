"""Warning headers: any text a client chose is sent as printable ASCII, and their total is bounded."""

from __future__ import annotations

import pytest

from nodus.api.http import responses


@pytest.mark.parametrize(
    ("warning", "header"),
    [
        pytest.param('unknown field "spec.x"', '299 - "unknown field \\"spec.x\\""', id="quotes"),
        pytest.param('unknown field "spec.é"', '299 - "unknown field \\"spec.\\\\u00e9\\""', id="latin-1"),
        pytest.param("spec.\N{SLIGHTLY SMILING FACE}", '299 - "spec.\\\\U0001f642"', id="astral"),
        pytest.param("a\nb\x00c", '299 - "a\\\\u000ab\\\\u0000c"', id="controls"),
        pytest.param("back\\slash", '299 - "back\\\\\\\\slash"', id="backslash"),
    ],
)
def test_a_warning_is_quoted_printable_ascii(warning: str, header: str) -> None:
    assert responses.warning_headers([warning]) == [("warning", header)]
    header.encode("ascii")


def test_many_warnings_are_cut_as_kube_apiserver_cuts_them() -> None:
    warnings = [f"unknown field {n}: " + "x" * 300 for n in range(1000)]
    headers = responses.warning_headers(warnings)
    texts = [value for _, value in headers]
    assert sum(len(text) for text in texts) < 2 * responses.WARNINGS_TOTAL
    assert all(len(text) <= responses.WARNING_CUT + 10 for text in texts)
    assert texts[-1].endswith('more warnings not shown"') and texts[0].startswith('299 - "unknown field 0: x')


def test_a_few_short_warnings_are_kept_whole() -> None:
    warnings = [f"warning {n}" for n in range(20)]
    assert [value for _, value in responses.warning_headers(warnings)] == [f'299 - "warning {n}"' for n in range(20)]
