"""The inspector at ``/ui``: static files shipped in the package (``hrt/ui/``: plain ES modules and
CSS, no build step), served as they are.

They hold no data: the page asks for an API key (kept in the tab's session storage, sent only as
``Authorization`` to the API routes, which check it as for any client), so the files themselves
need no key, and the Guard lets their exact paths through (:func:`ui_paths`). Every answer carries
a Content-Security-Policy allowing scripts, styles and requests from this origin only, no inline
script or style and no framing; the page writes what it reads as text (``textContent``), never as
HTML.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

PREFIX = "/ui"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-cache",
}
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


def ui_files() -> dict[str, bytes]:
    """The inspector's files by name (``index.html``, ``app.js``, ...), read from the package."""
    folder = resources.files("hrt") / "ui"
    out: dict[str, bytes] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in MEDIA_TYPES:
            out[entry.name] = entry.read_bytes()
    return dict(sorted(out.items()))


def ui_paths(files: dict[str, bytes]) -> frozenset[str]:
    """The paths that answer without a key: the page and its files, nothing else."""
    return frozenset({PREFIX, PREFIX + "/", *(f"{PREFIX}/{name}" for name in files)})


def ui_routes(files: dict[str, bytes]) -> list[BaseRoute]:
    """``GET /ui`` (the page), ``/ui/`` (to it) and one route per file."""

    def serve(name: str) -> Route:
        body = files[name]
        media_type = MEDIA_TYPES["." + name.rsplit(".", 1)[-1]]

        async def endpoint(request: Request) -> Response:
            return Response(body, media_type=media_type, headers=SECURITY_HEADERS)

        return Route(f"{PREFIX}/{name}", endpoint, methods=["GET"], include_in_schema=False)

    async def page(request: Request) -> Response:
        return Response(files["index.html"], media_type=MEDIA_TYPES[".html"], headers=SECURITY_HEADERS)

    async def slash(request: Request) -> Response:
        return RedirectResponse(PREFIX, status_code=308, headers=SECURITY_HEADERS)

    routes: list[BaseRoute] = [
        Route(PREFIX, page, methods=["GET"], include_in_schema=False),
        Route(PREFIX + "/", slash, methods=["GET"], include_in_schema=False),
    ]
    return routes + [serve(name) for name in files if name != "index.html"]
