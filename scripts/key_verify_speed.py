"""How long verifying an API key takes (docs/security.md): ``python scripts/key_verify_speed.py``.

Times :meth:`hrt.auth.KeyRing.authenticate` for a key already loaded in the ring (the request path:
parse the header, find the key by id, SHA-256 of the token, constant-time compare, lineage and
status), for a right and for a wrong secret, and one scrypt verification of a key stored by an
older version (paid once per such key, then it is re-stored as SHA-256)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path

from hrt.auth import KeyRing, legacy_hash, new_key
from hrt.errors import Unauthenticated
from hrt.stores.embedded.store import EmbeddedStore


async def per_call_us(ring: KeyRing, header: str, n: int) -> float:
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            with contextlib.suppress(Unauthenticated):
                await ring.authenticate(header)
        runs.append((time.perf_counter() - started) / n * 1e6)
    return round(statistics.median(runs), 1)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = EmbeddedStore(Path(tmp) / "keys.db", dim=None)
        token, record = new_key("agent", ["retrieve"], ["u1"])
        await store.records.create_key(record)
        ring = KeyRing(store.records, refresh_s=3600.0)
        await ring.refresh()
        wrong = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
        started = time.perf_counter()
        legacy_hash(token, b"0123456789abcdef")
        scrypt_ms = (time.perf_counter() - started) * 1000
        print(
            json.dumps(
                {
                    "authenticate_right_secret_us": await per_call_us(ring, f"Bearer {token}", 20_000),
                    "authenticate_wrong_secret_us": await per_call_us(ring, f"Bearer {wrong}", 20_000),
                    "scrypt_once_ms": round(scrypt_ms, 1),
                }
            )
        )
        store.close()


if __name__ == "__main__":
    asyncio.run(main())
