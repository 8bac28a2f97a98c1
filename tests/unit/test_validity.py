"""Facts that change (#20) through the whole pipeline, on the embedded store: a superseded fact is
set aside and counted by default, returned (marked, without recency) on request or at an earlier
``valid_at``, and every answer stays a function of the data and the request. The same behaviour
on the services deployment: tests/integration/test_congruence.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hrt.config import Settings
from hrt.contract import AugmentedMemoryContext, RetrieveRequest
from hrt.errors import InvalidInput
from hrt.ingest import parse_jsonl, parse_record
from hrt.service import HRTService
from tests.helpers import HashingEmbedder, artifact, concept, jsonl, mu, rel

AS_OF = "2025-08-01T00:00:00Z"

# a deadline that moved twice, an owner who changed, a reversed decision (as the sample data has)
FACTS = [
    concept("u", "c-launch", "Launch", "the product launch"),
    concept("u", "c-orphan", "Glossary", "a term nothing mentions yet"),
    concept("u", "c-later", "Retro", "the launch retro", valid_from="2025-09-01T00:00:00Z"),
    mu("u", "d1", "launch deadline is March 1", "2025-01-05T09:00:00Z"),
    mu("u", "d2", "launch deadline moved to April 15", "2025-02-10T09:00:00Z", supersedes=["d1"]),
    mu("u", "d3", "launch deadline moved to May 30", "2025-04-01T09:00:00Z", supersedes=["d2"]),
    mu("u", "o1", "launch owner is Ana", "2025-01-06T09:00:00Z"),
    mu(
        "u",
        "o2",
        "launch owner becomes Ben",
        "2025-03-01T09:00:00Z",
        supersedes=["o1"],
        valid_from="2025-03-15T00:00:00Z",
    ),
    mu("u", "x1", "launch pricing trial ended", "2025-01-07T09:00:00Z", valid_to="2025-02-01T00:00:00Z"),
    # recorded after it ended: true before February, since a time not given
    mu("u", "x2", "launch beta waitlist had closed", "2025-03-01T09:00:00Z", valid_to="2025-02-01T00:00:00Z"),
    artifact("u", "r1", "launch decision record: ship in one region", "2025-01-08T00:00:00Z"),
    artifact("u", "r2", "launch decision record reversed: ship worldwide", "2025-05-02T00:00:00Z", supersedes=["r1"]),
    mu("u", "future", "launch plan for next year", "2025-12-01T09:00:00Z", title="future"),
    *[rel("u", "MENTIONS", m, "c-launch") for m in ("d1", "d2", "d3", "o1", "o2", "x1", "x2", "future")],
    rel("u", "MENTIONS", "future", "c-later"),
]


@pytest.fixture
async def svc(tmp_path: Path) -> AsyncIterator[HRTService]:
    service = HRTService(Settings(db_path=tmp_path / "v.db"), embedder=HashingEmbedder())
    await service.ingest(parse_jsonl(jsonl(FACTS)))
    yield service
    await service.close()


def request(**extra: Any) -> RetrieveRequest:
    body = {"user_id": "u", "key_phrases": ["launch deadline owner decision"], "as_of": AS_OF}
    body["limits"] = {"memory_units": 10, "concepts": 5, "artifacts": 5}
    return RetrieveRequest.model_validate({**body, **extra})


def returned(doc: AugmentedMemoryContext) -> set[str]:
    return (
        {m.muid for m in doc.retrieved_memory_units}
        | {c.id for c in doc.retrieved_concepts}
        | {a.id for a in doc.retrieved_artifacts}
    )


async def test_only_current_facts_by_default_and_the_old_ones_counted(svc: HRTService) -> None:
    doc = await svc.retrieve(request())
    got = returned(doc)
    assert {"d3", "o2", "r2", "c-launch"} <= got
    assert not {"d1", "d2", "o1", "x1", "x2", "r1"} & got
    assert "future" not in got and "c-later" not in got, "not known as of the request"
    v = doc.retrieval_metadata.validity
    assert v.valid_at == AS_OF and v.include_invalidated is False
    # d1, d2 and o1 superseded, x1 and x2 ended (search left them out, the walk reached them); r1 superseded
    assert v.suppressed == {"memory_unit": 5, "concept": 0, "artifact": 1}
    assert v.intervals["o2"].valid_from == "2025-03-15T00:00:00Z" and v.intervals["o2"].valid_to is None
    assert v.intervals["d3"].valid_from == "2025-04-01T09:00:00Z"
    assert all(i.valid for i in v.intervals.values()) and set(v.intervals) == got
    (launch,) = [c for c in doc.retrieved_concepts if c.id == "c-launch"]
    related = {t.id for t in launch.related_top_memory_unit_ids_and_titles}
    assert related and not {"d1", "d2", "o1", "x1"} & related, "assembly lists only current memories"


async def test_the_old_facts_on_request_marked_and_without_recency(svc: HRTService) -> None:
    doc = await svc.retrieve(request(include_invalidated=True))
    got = returned(doc)
    assert {"d1", "d2", "d3", "o1", "o2", "x1", "r1", "r2"} <= got
    v = doc.retrieval_metadata.validity
    assert v.suppressed == {"memory_unit": 0, "concept": 0, "artifact": 0}
    d1, d2 = v.intervals["d1"], v.intervals["d2"]
    # the old fact ends when its successor starts (its creation, having no valid_from of its own)
    assert (d1.valid_to, d1.superseded_by, d1.valid) == ("2025-02-10T09:00:00Z", ["d2"], False)
    assert (d2.valid_to, d2.superseded_by, d2.valid) == ("2025-04-01T09:00:00Z", ["d3"], False)
    assert v.intervals["o1"].valid_to == "2025-03-15T00:00:00Z", "o2's own valid_from, not its creation"
    assert v.intervals["x1"].valid_to == "2025-02-01T00:00:00Z" and not v.intervals["x1"].valid
    scores = {m.muid: m.score_breakdown for m in doc.retrieved_memory_units}
    assert scores["d1"].recency == 0.0 and scores["o1"].recency == 0.0 and scores["d3"].recency > 0.0


async def test_an_earlier_valid_at_returns_what_was_true_then(svc: HRTService) -> None:
    # March 1, as known now: d2 (moved to April 15) held, Ana was the owner, the trial had ended
    doc = await svc.retrieve(request(valid_at="2025-03-01T00:00:00Z"))
    got = returned(doc)
    assert {"d2", "o1", "r1"} <= got
    assert not {"d1", "d3", "o2", "x1", "r2"} & got
    assert doc.retrieval_metadata.validity.valid_at == "2025-03-01T00:00:00Z"
    assert doc.retrieval_metadata.as_of == AS_OF
    january = returned(await svc.retrieve(request(valid_at="2025-01-20T00:00:00Z")))
    assert {"d1", "o1", "x1", "x2", "r1"} <= january and not {"d2", "d3"} & january
    x2 = (await svc.retrieve(request(valid_at="2025-01-20T00:00:00Z"))).retrieval_metadata.validity.intervals["x2"]
    assert (x2.valid_from, x2.valid_to) == (None, "2025-02-01T00:00:00Z")


async def test_as_of_before_a_successor_was_written_keeps_the_old_fact_current(svc: HRTService) -> None:
    # known on March 1: d2 had not been superseded yet (d3 was written April 1), o2 was written but
    # starts on March 15
    doc = await svc.retrieve(request(as_of="2025-03-01T12:00:00Z"))
    got = returned(doc)
    assert {"d2", "o1"} <= got and not {"d1", "d3", "o2"} & got
    assert doc.retrieval_metadata.validity.intervals["d2"].valid_to is None
    o1 = doc.retrieval_metadata.validity.intervals["o1"]  # its end is known, and still ahead
    assert (o1.valid_to, o1.superseded_by, o1.valid) == ("2025-03-15T00:00:00Z", ["o2"], True)


async def test_concepts_appear_at_their_first_mention(svc: HRTService) -> None:
    ancient = await svc.retrieve(
        RetrieveRequest(user_id="u", key_phrases=["Launch", "Glossary"], as_of="1900-01-01T00:00:00Z")
    )
    # nothing had mentioned Launch yet; Glossary, mentioned by nothing, has no start
    assert [c.id for c in ancient.retrieved_concepts] == ["c-orphan"]
    later = await svc.retrieve(RetrieveRequest(user_id="u", key_phrases=["Retro"], as_of="2025-12-31T00:00:00Z"))
    assert "c-later" in returned(later)
    before_its_start = await svc.retrieve(
        RetrieveRequest(
            user_id="u", key_phrases=["Retro"], as_of="2025-12-31T00:00:00Z", valid_at="2025-08-01T00:00:00Z"
        )
    )
    assert "c-later" not in returned(before_its_start)
    # its own valid_from, not its first mention (December), says when it appears
    october = await svc.retrieve(RetrieveRequest(user_id="u", key_phrases=["Retro"], as_of="2025-10-01T00:00:00Z"))
    assert "c-later" in returned(october)


async def test_pinned_requests_are_byte_identical(svc: HRTService) -> None:
    for extra in ({}, {"include_invalidated": True}, {"valid_at": "2025-03-01T00:00:00Z"}):
        first = (await svc.retrieve(request(**extra))).canonical_json()
        assert (await svc.retrieve(request(**extra))).canonical_json() == first


async def test_a_superseded_fact_comes_back_when_its_successor_is_deleted(svc: HRTService) -> None:
    await svc.ingest(parse_jsonl(jsonl([{"op": "delete", "kind": "memory_unit", "user_id": "u", "muid": "d3"}])))
    got = returned(await svc.retrieve(request()))
    assert "d2" in got and "d3" not in got


def test_bad_intervals_and_supersessions_are_refused_naming_the_field() -> None:
    cases = [
        (mu("u", "a", "x", valid_from="2025-02-01T00:00:00Z", valid_to="2025-01-01T00:00:00Z"), "valid_to"),
        (mu("u", "a", "x", supersedes=["a"]), "supersedes"),
        (mu("u", "a", "x", supersedes=["b", "b"]), "supersedes"),
        (mu("u", "a", "x", supersedes=[f"m{i}" for i in range(17)]), "supersedes"),
        (mu("u", "a", "x", valid_from=1700000000), "valid_from"),
        (rel("u", "SUPERSEDES", "a", "a"), "target"),
    ]
    for record, field in cases:
        with pytest.raises(InvalidInput) as caught:
            parse_record(record, "line 1")
        assert caught.value.field == field, (record, caught.value)


async def test_supersedes_names_an_entity_of_the_same_user(svc: HRTService) -> None:
    with pytest.raises(InvalidInput) as caught:
        await svc.ingest(parse_jsonl(jsonl([mu("u", "d4", "deadline again", supersedes=["nobody"])])))
    assert caught.value.field == "target"
    with pytest.raises(InvalidInput):
        await svc.ingest(parse_jsonl(jsonl([mu("u", "d4", "deadline again", supersedes=["c-launch"])])))


# --- the property: nothing returned is outside its interval at valid_at, unless asked for ----

DAYS = [datetime(2025, 1, 1 + d, tzinfo=UTC) for d in range(0, 28, 3)]
day = st.sampled_from(DAYS)


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(3, 7))
    records: list[dict[str, Any]] = [concept("p", "topic", "topic", "the topic")]
    for i in range(n):
        extra: dict[str, Any] = {}
        start, end = draw(st.one_of(st.none(), day)), draw(st.one_of(st.none(), day))
        if start is not None:
            extra["valid_from"] = start.isoformat()
        if end is not None and (start is None or end > start):
            extra["valid_to"] = end.isoformat()
        older = draw(st.lists(st.integers(0, i - 1), unique=True, max_size=2)) if i else []
        if older:
            extra["supersedes"] = [f"f{j}" for j in older]
        records.append(mu("p", f"f{i}", f"topic fact {i}", draw(day).isoformat(), **extra))
        records.append(rel("p", "MENTIONS", f"f{i}", "topic"))
    return records


def expected_valid(records: list[dict[str, Any]], ident: str, as_of: datetime, at: datetime) -> bool:
    """The rule of docs/api.md, "Facts that change", written out from the records alone."""
    by_id = {r["muid"]: r for r in records if r["kind"] == "memory_unit"}
    me = by_id[ident]
    end = datetime.fromisoformat(me["valid_to"]) if "valid_to" in me else None
    created = datetime.fromisoformat(me["creation_ts"])
    if "valid_from" in me:
        start: datetime | None = datetime.fromisoformat(me["valid_from"])
    else:  # recorded when it was true, unless recorded after it ended: then since a time not given
        start = None if end is not None and created >= end else created
    if end is None:
        successors = [
            r
            for r in by_id.values()
            if ident in r.get("supersedes", []) and datetime.fromisoformat(r["creation_ts"]) <= as_of
        ]
        starts = [datetime.fromisoformat(r.get("valid_from", r["creation_ts"])) for r in successors]
        end = min(starts) if starts else None
    return (start is None or start <= at) and (end is None or at < end)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=histories(), as_of=day, at=day, include=st.booleans())
async def test_property_nothing_returned_is_outside_its_interval(tmp_path_factory, records, as_of, at, include):
    service = HRTService(Settings(db_path=tmp_path_factory.mktemp("p") / "p.db"), embedder=HashingEmbedder())
    try:
        await service.ingest(parse_jsonl(jsonl(records)))
        doc = await service.retrieve(
            RetrieveRequest(
                user_id="p",
                key_phrases=["topic fact"],
                as_of=as_of,
                valid_at=at,
                include_invalidated=include,
                limits={"memory_units": 10, "concepts": 1, "artifacts": 0},
                max_depth=2,
            )
        )
    finally:
        await service.close()
    intervals = doc.retrieval_metadata.validity.intervals
    for m in doc.retrieved_memory_units:
        truth = expected_valid(records, m.muid, as_of, at)
        assert intervals[m.muid].valid == truth, (m.muid, intervals[m.muid])
        assert include or truth, f"{m.muid} is not valid at {at} but was returned"
    if not include:  # and everything valid and known is returned (they all match the phrase)
        known = [
            r["muid"]
            for r in records
            if r["kind"] == "memory_unit" and datetime.fromisoformat(r["creation_ts"]) <= as_of
        ]
        valid = {i for i in known if expected_valid(records, i, as_of, at)}
        assert {m.muid for m in doc.retrieved_memory_units} == valid
