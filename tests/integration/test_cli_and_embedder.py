"""The CLI's commands (README, docs/api.md) and the real embedding model."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from hrt.contract import AugmentedMemoryContext
from hrt.embedder import CachedEmbedder

pytestmark = pytest.mark.integration


def run_hrt(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hrt.cli", *args], capture_output=True, text=True, timeout=600, env=env
    )


def test_demo_prints_valid_deterministic_v94(tmp_path):
    first = run_hrt("demo", "--out", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    second = run_hrt("demo", "--out", str(tmp_path / "b"))
    files = sorted((tmp_path / "a").glob("demo-*.json"))
    assert len(files) == 4
    for f in files:
        doc = AugmentedMemoryContext.model_validate_json(f.read_text())
        assert doc.retrieved_memory_units, f.name
        assert f.read_bytes() == (tmp_path / "b" / f.name).read_bytes()
    assert "request 3" in first.stderr and second.returncode == 0
    maya = AugmentedMemoryContext.model_validate_json(files[0].read_text())
    # the deep-work book is Sara's, not Maya's: an honest unmatched phrase
    assert maya.unmatched_key_phrases == ["that book on deep work"]
    # a fact that changed: March's pricing is superseded by June's, set aside and counted
    pricing = AugmentedMemoryContext.model_validate_json(files[3].read_text())
    returned = {m.muid for m in pricing.retrieved_memory_units} | {a.id for a in pricing.retrieved_artifacts}
    assert "maya-a-003" in returned and not {"maya-mu-017", "maya-a-002"} & returned
    assert pricing.retrieval_metadata.validity.suppressed["artifact"] >= 1
    assert "request 4" in first.stderr and "set aside as no longer true" in first.stderr


def test_ingest_query_and_a_bad_line(tmp_path):
    db = str(tmp_path / "cli.db")
    good = tmp_path / "good.jsonl"
    good.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {
                    "kind": "concept",
                    "user_id": "me",
                    "id": "c1",
                    "name": "Sourdough",
                    "type": "habit",
                    "description": "Weekend bread baking",
                },
                {
                    "kind": "memory_unit",
                    "user_id": "me",
                    "muid": "m1",
                    "title": "Starter",
                    "content": "Fed the sourdough starter at 8am; it doubled by noon.",
                    "creation_ts": "2025-03-01T08:00:00Z",
                },
                {"kind": "relation", "user_id": "me", "type": "MENTIONS", "source": "m1", "target": "c1"},
            ]
        )
        + "\n"
    )
    r = run_hrt("ingest", str(good), "--db", db)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"upserted": 3, "deleted": 0}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text() + '{"kind": "memory_unit", "user_id": "me", "muid": "m2"}\n')
    r = run_hrt("ingest", str(bad), "--db", db)
    assert r.returncode == 2 and "line 4: field 'content'" in r.stderr
    q = run_hrt(
        "query",
        "--user",
        "me",
        "--phrase",
        "sourdough starter",
        "--as-of",
        "2025-04-01T00:00:00Z",
        "--json",
        "--db",
        db,
    )
    assert q.returncode == 0, q.stderr
    doc = AugmentedMemoryContext.model_validate_json(q.stdout)
    assert [m.muid for m in doc.retrieved_memory_units] == ["m1"]
    assert [c.id for c in doc.retrieved_concepts] == ["c1"]
    text = run_hrt("query", "--user", "me", "--phrase", "sourdough", "--db", db)
    assert "memory" in text.stdout and "m1" in text.stdout
    unknown = run_hrt("query", "--user", "nobody", "--phrase", "x", "--db", db)
    assert unknown.returncode == 0 and "nothing is stored for user nobody yet" in unknown.stdout
    m = run_hrt("migrate", "--db", db)
    embedded = json.loads(m.stdout)["embedded"]
    # 2: API keys, 3: filters, 4: validity intervals, 5: passage vectors, 6: key lineage, 7: extraction state
    assert embedded["schema_versions"] == [1, 2, 3, 4, 5, 6, 7, 8] and embedded["applied_now"] == []
    # a fact that changes: the new one supersedes m1, which the query sets aside, or shows marked
    newer = tmp_path / "newer.jsonl"
    successor = {
        "kind": "memory_unit",
        "user_id": "me",
        "muid": "m2",
        "content": "Fed the sourdough starter at 7am now; it doubles by eleven.",
        "creation_ts": "2025-05-01T07:00:00Z",
        "supersedes": ["m1"],
    }
    newer.write_text(json.dumps(successor) + "\n")
    assert run_hrt("ingest", str(newer), "--db", db).returncode == 0
    now = run_hrt("query", "--user", "me", "--phrase", "sourdough starter", "--as-of", "2025-06-01", "--db", db)
    memories = [line.split()[3] for line in now.stdout.splitlines() if line.startswith("  memory ")]
    assert memories == ["m2"], now.stdout
    assert "set aside as not true on 2025-06-01: 1 memory_unit" in now.stdout, now.stdout
    old = run_hrt(
        "query",
        "--user",
        "me",
        "--phrase",
        "sourdough starter",
        "--as-of",
        "2025-06-01",
        "--include-invalidated",
        "--db",
        db,
    )
    assert "no longer true on 2025-06-01: m1" in old.stdout, old.stdout
    then = run_hrt(
        "query",
        "--user",
        "me",
        "--phrase",
        "sourdough starter",
        "--as-of",
        "2025-06-01",
        "--valid-at",
        "2025-04-01",
        "--json",
        "--db",
        db,
    )
    assert [m.muid for m in AugmentedMemoryContext.model_validate_json(then.stdout).retrieved_memory_units] == ["m1"]


def test_real_embedder_is_normalised_semantic_and_cached(real_embedder):
    vecs = real_embedder.embed(["Project Phoenix timeline", "schedule of the Phoenix project", "banana bread"])
    assert vecs.shape == (3, real_embedder.dim) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert float(vecs[0] @ vecs[1]) > float(vecs[0] @ vecs[2]) + 0.2
    assert isinstance(real_embedder, CachedEmbedder)
    before = real_embedder.misses
    again = real_embedder.embed(["Project Phoenix timeline"])
    assert real_embedder.misses == before and np.array_equal(again[0], vecs[0])
