"""Reading one entity and browsing (#33), at the record store port: every deployment (embedded,
PostgreSQL with embedded projections, services) answers ``entity_detail`` and ``browse`` alike,
scoped by user, with the writer recorded at write time. The same ``deployment`` fixture as the
store contract suite; u3's project history of the validity suite."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hrt.browse import BrowseRequest, browse_entities, read_entity
from hrt.errors import InvalidInput, NotFound
from hrt.ingest import parse_jsonl
from hrt.records import EdgeType, Kind
from hrt.stores.base import BrowseFilter
from tests.conftest import FIXED_NOW
from tests.contract.test_store_contract import deployment  # noqa: F401  (the fixture)
from tests.contract.test_validity_contract import HISTORY, ts
from tests.helpers import jsonl, mu

HISTORY_IDS = sorted(["c-atlas", "c-lee", "c-kim", "m-old", "m-new", "m-kick", "a-v1", "a-v2"])


@pytest.fixture
async def history(deployment):  # noqa: F811
    extra = [
        mu(
            "u3",
            "m-tagged",
            "Atlas retro",
            "2025-05-02T09:00:00Z",
            tags=["retro", "atlas"],
            source_agent_id="bot-1",
            title="Atlas Retro",
        ),
        mu("u3", "m-other", "Lunch plans", "2025-05-03T09:00:00Z", tags=["food"], source_agent_id="bot-2"),
    ]
    await deployment.service.ingest(parse_jsonl(jsonl(HISTORY + extra)), written_by="key-writer")
    return deployment


ALL_U3 = sorted([*HISTORY_IDS, "m-tagged", "m-other"])


async def test_an_entity_reads_with_its_writer_relations_and_supersession(history):
    detail = await history.records.entity_detail("u3", Kind.MEMORY_UNIT, "m-old", 100)
    assert detail is not None
    assert detail.stored.entity.content == "Atlas deadline is March 31"
    assert detail.stored.version == 1
    assert detail.stored.written_by == "key-writer"
    assert detail.stored.written_at == FIXED_NOW.timestamp()  # the service clock's, not the store's
    assert [(x.other_id, x.outgoing, x.relation.type) for x in detail.supersession] == [
        ("m-new", False, EdgeType.SUPERSEDES)
    ]
    assert detail.supersession[0].other_start == ts("2025-03-15T00:00:00Z")  # m-new's own valid_from
    # by type, out before in, weight descending, other id
    assert [(x.relation.type.value, x.outgoing, x.other_id, x.other_kind) for x in detail.relations] == [
        ("MENTIONS", True, "c-atlas", Kind.CONCEPT),
        ("SUPERSEDES", False, "m-new", Kind.MEMORY_UNIT),
    ]
    assert detail.relation_count == 2 and detail.mentioned_by == 0
    assert detail.relations[0].other_label == "Project Atlas"


async def test_a_concept_counts_its_mentions_and_its_relations_beyond_the_limit(history):
    detail = await history.records.entity_detail("u3", Kind.CONCEPT, "c-atlas", 2)
    assert detail is not None
    assert detail.mentioned_by == 3 and detail.relation_count == 5
    assert [(x.relation.type.value, x.outgoing, x.other_id) for x in detail.relations] == [
        ("MENTIONS", False, "m-kick"),
        ("MENTIONS", False, "m-new"),
    ]
    full = await history.records.entity_detail("u3", Kind.CONCEPT, "c-atlas", 100)
    assert full is not None
    related = [x for x in full.relations if x.relation.type is EdgeType.RELATED_TO]
    assert [(x.other_id, x.relation.valid_to) for x in related] == [
        ("c-kim", datetime(2025, 4, 1, tzinfo=UTC)),
        ("c-lee", None),
    ]
    assert full.supersession == []


async def test_reads_are_scoped_by_user_and_kind(history):
    assert await history.records.entity_detail("u1", Kind.MEMORY_UNIT, "m-old", 10) is None
    assert await history.records.entity_detail("ghost", Kind.CONCEPT, "c-atlas", 10) is None
    assert await history.records.entity_detail("u3", Kind.CONCEPT, "m-old", 10) is None  # not a concept
    assert await history.records.entity_detail("u2", Kind.CONCEPT, "c-phx", 10) is None  # u1's id, u2 has xc-phx
    mine = await history.records.entity_detail("u1", Kind.CONCEPT, "c-phx", 100)
    assert mine is not None and all(not x.other_id.startswith("x") for x in mine.relations)
    # the view: another user's id and an absent one are the same NotFound, word for word
    with pytest.raises(NotFound) as theirs:
        await read_entity(history.records, "u1", Kind.CONCEPT, "xc-phx")
    with pytest.raises(NotFound) as absent:
        await read_entity(history.records, "u1", Kind.CONCEPT, "xc-nothing")
    assert str(theirs.value).replace("xc-phx", "ID") == str(absent.value).replace("xc-nothing", "ID")


async def test_the_entity_view_reads_validity_as_retrieval_does(history):
    old = await read_entity(history.records, "u3", Kind.MEMORY_UNIT, "m-old")
    assert old.validity.model_dump() == {"valid_from": "2025-01-10T09:00:00Z", "valid_to": "2025-03-15T00:00:00Z"}
    assert [r.id for r in old.superseded_by] == ["m-new"] and old.supersedes == []
    assert old.written_at == "2025-08-01T00:00:00Z" and old.written_by == "key-writer"
    assert old.record["muid"] == "m-old" and old.record["creation_ts"] == "2025-01-10T09:00:00Z"
    new = await read_entity(history.records, "u3", Kind.MEMORY_UNIT, "m-new")
    assert [r.id for r in new.supersedes] == ["m-old"] and new.superseded_by == []
    assert new.validity.valid_to is None
    concept = await read_entity(history.records, "u3", Kind.CONCEPT, "c-atlas")
    assert concept.mentioned_by == 3 and old.mentioned_by is None
    again = await read_entity(history.records, "u3", Kind.CONCEPT, "c-atlas")
    assert again.model_dump_json() == concept.model_dump_json()


async def ids(history, user: str, **where) -> list[str]:
    return [s.entity.id for s in await history.records.browse(user, BrowseFilter(limit=1000, **where))]


async def test_browse_pages_in_id_order_by_user(history):
    assert await ids(history, "u3") == ALL_U3
    assert await ids(history, "ghost") == []
    u1 = await ids(history, "u1")
    assert u1 == sorted(u1) and not set(u1) & set(ALL_U3) and all(not i.startswith("x") for i in u1)
    first = await history.records.browse("u3", BrowseFilter(limit=3))
    assert [s.entity.id for s in first] == ALL_U3[:3]
    assert first[0].written_by == "key-writer" and first[0].written_at == FIXED_NOW.timestamp()
    assert await ids(history, "u3", after=ALL_U3[2]) == ALL_U3[3:]
    assert await ids(history, "u3", kind=Kind.CONCEPT, after="c-kim") == ["c-lee"]


async def test_browse_filters(history):
    assert await ids(history, "u3", kind=Kind.ARTIFACT) == ["a-v1", "a-v2"]
    assert await ids(history, "u3", tags=("atlas", "nope")) == ["m-tagged"]
    assert await ids(history, "u3", agents=("bot-2",)) == ["m-other"]
    may = ts("2025-05-01T00:00:00Z")
    assert await ids(history, "u3", created_after=may) == ["m-other", "m-tagged"]
    assert await ids(history, "u3", created_before=ts("2025-01-10T09:00:00Z")) == ["m-kick"]  # before: excluded
    assert await ids(history, "u3", prefix="atlas r") == ["m-tagged"]  # a title, any case
    assert await ids(history, "u3", prefix="a-v") == ["a-v1", "a-v2"]
    assert await ids(history, "u3", prefix="project") == ["c-atlas"]  # a concept's name
    assert await ids(history, "u3", prefix="zzz") == []


async def test_browse_leaves_out_what_ended_or_was_superseded_as_retrieval_does(history):
    now = FIXED_NOW.timestamp()  # 2025-08-01: m-old and a-v1 superseded, m-kick ended in February
    assert await ids(history, "u3", ended_by=now) == [i for i in ALL_U3 if i not in ("a-v1", "m-kick", "m-old")]
    # valid on 2025-02-15: m-kick had ended, m-new (from March 15), a-v2 (April) and Lee (March) not begun
    assert await ids(history, "u3", valid_at=ts("2025-02-15T00:00:00Z")) == ["a-v1", "c-atlas", "c-kim", "m-old"]
    assert await ids(history, "u3", valid_at=ts("2025-01-06T00:00:00Z")) == ["c-atlas", "c-kim", "m-kick"]


async def test_browse_pages_through_cursors_while_writes_happen(history):
    request = BrowseRequest(limit=3, include_invalidated=True)
    seen: list[str] = []
    page = await browse_entities(history.records, "u3", request, FIXED_NOW)
    pages = 1
    while True:
        seen += [e.id for e in page.entities]
        if page.next_cursor is None:
            break
        if pages == 1:  # written between pages: one before the cursor (missed), one after (found)
            await history.service.ingest(
                parse_jsonl(jsonl([mu("u3", "a-0-early", "early"), mu("u3", "zz-late", "late")]))
            )
        page = await browse_entities(
            history.records, "u3", BrowseRequest(limit=3, include_invalidated=True, cursor=page.next_cursor), FIXED_NOW
        )
        pages += 1
    assert seen == [*ALL_U3, "zz-late"]
    with pytest.raises(InvalidInput) as other:
        await browse_entities(
            history.records,
            "u3",
            BrowseRequest(limit=3, kind=Kind.CONCEPT, cursor=request.cursor_after("c")),
            FIXED_NOW,
        )
    assert other.value.field == "cursor"
