from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hrt.config import Settings
from hrt.ingest import parse_jsonl
from hrt.service import HRTService
from tests.helpers import HashingEmbedder, jsonl, small_graph

FIXED_NOW = datetime(2025, 8, 1, tzinfo=UTC)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(db_path=tmp_path / "hrt.db")


@pytest.fixture
def hashing_service(settings: Settings) -> Iterator[HRTService]:
    """An embedded HRT over a fresh SQLite file, with the hashing test embedder."""
    svc = HRTService(settings, embedder=HashingEmbedder(), clock=lambda: FIXED_NOW)
    yield svc
    svc.close()


@pytest.fixture
def loaded_service(hashing_service: HRTService) -> HRTService:
    hashing_service.ingest(parse_jsonl(jsonl(small_graph("u1") + small_graph("u2", prefix="x"))))
    return hashing_service
