"""Settings a person can debug: ``HRT_*`` variables HRT does not know (a misspelling is otherwise
silently ignored) named with the nearest known one, and a bad value's error naming the variable
(``HRT_WEIGHTS``), not the internal field, in one line."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

from pydantic import ValidationError
from pydantic_settings import SettingsError

from hrt.config import Settings

# HRT_* variables read by something other than the server's settings: the clients (HRT_URL,
# HRT_API_KEY), the dev stack and the tools, the compose file's PostgreSQL role (HRT_DB_*), the
# test suite's own knobs
OTHER_VARIABLES = frozenset(
    {
        "HRT_URL",
        "HRT_API_KEY",
        "HRT_SYSTEMS",
        "HRT_DEV_DIR",
        "HRT_DEV_POSTGRES_DURABLE",
        "HRT_POSTGRES_DB",
        "HRT_POSTGRES_ROLE",
        "HRT_DB_USER",
        "HRT_DB_NAME",
        "HRT_DB_PASSWORD",
        "HRT_LLAMA_CPP_PYTHON_VERSION",
        "HRT_LLAMA_MODEL",
        "HRT_RERANKER_GGUF",
        "HRT_FUZZ_EXAMPLES",
        "HRT_FUZZ_REPORT",
        "HRT_FUZZ_SERVICES_EXAMPLES",
    }
)
PREFIX = "HRT_"


def setting_variables() -> frozenset[str]:
    """Every variable that sets a field of :class:`Settings`."""
    return frozenset(PREFIX + name.upper() for name in Settings.model_fields)


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One warning per ``HRT_*`` variable of ``environ`` that nothing in HRT reads, with the
    nearest known name when one is close (sorted: the same environment, the same lines)."""
    known = setting_variables() | OTHER_VARIABLES
    lines = []
    for name in sorted(environ):
        if not name.startswith(PREFIX) or name in known:
            continue
        near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
        hint = f" (did you mean {near[0]}?)" if near else ""
        lines.append(f"{name} is not a variable HRT reads{hint}; it is ignored")
    return lines


_FIELD = re.compile(r'field "(\w+)"')


def settings_error(exc: BaseException) -> str | None:
    """The one line a bad setting's error becomes, naming its variable and never its value (a
    password may be one); None when ``exc`` is not about the settings."""
    if isinstance(exc, SettingsError):  # a value that had to be JSON (HRT_WEIGHTS) and was not
        found = _FIELD.search(str(exc))
        name = PREFIX + found.group(1).upper() if found else "an HRT_* variable"
        return f"{name}: not a valid value (this setting is JSON: a number, an object or a list)"
    if isinstance(exc, ValidationError) and exc.title == Settings.__name__:
        err = exc.errors()[0]
        loc = [str(x) for x in err["loc"]]
        if not loc:
            return f"the settings: {err['msg']}"
        inner = f" ({'.'.join(loc[1:])})" if len(loc) > 1 else ""
        return f"{PREFIX}{loc[0].upper()}{inner}: {err['msg']}"
    return None
