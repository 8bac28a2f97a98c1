"""The graph schema files (``graph_schema/NNN_name.cypher``) that ``apply_schema`` runs: where they
are and their statements."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

_SCHEMA_FILE = re.compile(r"^\d{3}_[a-z0-9_]+\.cypher$")
_IN_TRANSACTIONS = re.compile(r"\bIN\s+TRANSACTIONS\b", re.IGNORECASE)


def bundled_schema_dir() -> Path:
    """``graph_schema/``: packaged as ``hrt.graph_schema`` when installed, else the source tree's."""
    try:
        packaged = Path(str(resources.files("hrt.graph_schema")))
    except ModuleNotFoundError:
        packaged = None
    if packaged is not None and packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "graph_schema"


def schema_statements(folder: Path) -> list[str]:
    """The statements of ``NNN_name.cypher`` files in file order, one per ``;``, comments dropped."""
    statements: list[str] = []
    for path in sorted(p for p in folder.iterdir() if _SCHEMA_FILE.match(p.name)):
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if not ln.strip().startswith("//")]
        statements += [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
    return statements
