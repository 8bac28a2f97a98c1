"""``python -m hrt.eval locomo --data PATH --out DIR``: the same as ``hrt eval locomo``."""

from __future__ import annotations

import sys

from hrt.eval.locomo import main


def _run(argv: list[str]) -> int:
    if not argv or argv[0] != "locomo":
        print("usage: python -m hrt.eval locomo [--data PATH] [--out DIR] [...]", file=sys.stderr)
        return 2
    return main(argv[1:])


if __name__ == "__main__":
    raise SystemExit(_run(sys.argv[1:]))
