"""``python -m hrt.eval locomo|changes [...]``: the same as ``hrt eval locomo|changes``."""

from __future__ import annotations

import sys


def _run(argv: list[str]) -> int:
    if argv[:1] == ["locomo"]:
        from hrt.eval.locomo import main as locomo_main

        return locomo_main(argv[1:])
    if argv[:1] == ["changes"]:
        from hrt.eval.changes import main as changes_main

        return changes_main(argv[1:])
    print("usage: python -m hrt.eval locomo|changes [--data PATH] [--out DIR] [...]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(_run(sys.argv[1:]))
