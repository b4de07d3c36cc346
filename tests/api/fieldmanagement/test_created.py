"""A create's managedFields come from a one-walk fast path; it must say exactly what the general route says.

The general route is what every other write takes: ``record_update`` over a ``compare`` of nothing with the new
object, a FieldSet, then the encoding. Hypothesis writes objects that reach every branch: keyed lists (with items
missing their key, duplicates, non-object items), sets, atomic lists, nulls, empty objects and lists, untracked
metadata, a status the main resource never owns.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nodus.api.fieldmanagement import update_managed_fields
from nodus.api.fieldmanagement.managers import encode_managed_fields, record_update
from nodus.api.fieldmanagement.schema import ListTypes, Scope, StructureError
from tests.api.fieldmanagement import API_VERSION, LIST_KEYS, T1, configuration, job_spec, stored

NAMES = st.sampled_from(["name", "value", "type", "env", "a", "b", "sidecars", "image", "x.y", "f:z", "."])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False), st.text(max_size=3))


def json_values(depth: int = 3) -> st.SearchStrategy[Any]:
    if depth == 0:
        return SCALARS
    inner = json_values(depth - 1)
    return st.one_of(
        SCALARS,
        st.lists(inner, max_size=3),
        st.dictionaries(NAMES, inner, max_size=4),
        # Keyed-list items: usually with their key, sometimes not, sometimes repeated.
        st.lists(
            st.fixed_dictionaries(
                {}, optional={"name": st.sampled_from(["A", "B"]), "type": st.just("Ready"), "value": inner}
            ),
            max_size=3,
        ),
    )


OBJECTS = st.fixed_dictionaries(
    {"apiVersion": st.just(API_VERSION), "kind": st.just("Job")},
    optional={
        "metadata": st.fixed_dictionaries(
            {"name": st.just("train")},
            optional={
                "labels": st.dictionaries(NAMES, st.text(max_size=2), max_size=3),
                "finalizers": st.lists(st.sampled_from(["a", "b"]), max_size=3),
                "ownerReferences": st.lists(st.fixed_dictionaries({"uid": st.sampled_from(["1", "2"])}), max_size=2),
                "uid": st.just("u"),
                "generation": st.just(1),
            },
        ),
        "spec": st.dictionaries(NAMES, json_values(), max_size=5),
        "status": st.dictionaries(st.sampled_from(["conditions", "phase"]), json_values(2), max_size=2),
    },
)


def general_route(new: dict[str, Any], subresource: str = "") -> list[dict[str, Any]]:
    try:
        managed = record_update(
            {},
            {},
            new,
            manager="alice",
            api_version=API_VERSION,
            now=T1,
            scope=Scope(subresource),
            types=ListTypes(LIST_KEYS),
        )
    except StructureError:
        return []
    return encode_managed_fields(managed)


def fast_route(new: dict[str, Any]) -> list[dict[str, Any]]:
    return update_managed_fields(None, new, manager="alice", api_version=API_VERSION, list_keys=LIST_KEYS, now=T1)


@settings(max_examples=2000, deadline=None)
@given(OBJECTS)
def test_a_create_records_what_the_general_route_records(new: dict[str, Any]) -> None:
    assert fast_route(new) == general_route(new)


def test_a_realistic_job_and_an_object_that_owns_nothing() -> None:
    job = stored(configuration(job_spec(), metadata={"labels": {"team": "vision"}}, status={"phase": "Pending"}))
    assert fast_route(job) == general_route(job)
    assert fast_route(job)[0]["fieldsV1"]["f:spec"]["f:env"]['k:{"name":"LR"}'] == {
        ".": {},
        "f:name": {},
        "f:value": {},
    }
    assert fast_route({"apiVersion": API_VERSION, "kind": "Job", "metadata": {"name": "x"}}) == []
