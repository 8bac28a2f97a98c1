"""Print the OpenAPI document of ``hrt serve`` (canonical JSON: sorted keys, two-space indent), from
which ``scripts/generate-types.mjs`` writes ``src/types.gen.ts``. Run from the repository root:
``python clients/typescript/scripts/openapi.py > clients/typescript/openapi.json``. Opens no store."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path


def openapi_document() -> str:
    from hrt.api import create_app
    from hrt.config import Settings

    with tempfile.TemporaryDirectory() as tmp:  # the app is built, never started: no store is opened
        doc = create_app(Settings(db_path=Path(tmp) / "unused.db")).openapi()
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(openapi_document())
