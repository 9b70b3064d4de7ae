"""`/console`: the browser console, static files from `app/web/` (no build step).

The page is open; it asks for a token itself and sends it as `Authorization: Bearer` on every
API call, so serving these files reveals nothing. The xterm.js files are mounted separately by
`app.main` when `node_modules/` exists; without them the page falls back to a plain log view.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

from app.api.operation_ids import operation_id
from app.api.strict_route import StrictJsonRoute
from app.core.errors import NotFoundError

WEB_DIR = Path(__file__).resolve().parent.parent.parent / "web"
XTERM_DIR = WEB_DIR.parent.parent / "node_modules" / "@xterm"
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
# Scripts only from this origin and never inline, so an injected tag in a command cannot run.
# xterm.js styles its rows through a <style> element it creates, hence 'unsafe-inline' for styles.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self' data:; font-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

router = APIRouter(
    generate_unique_id_function=operation_id,
    tags=["console"],
    include_in_schema=False,
    route_class=StrictJsonRoute,
)


def _asset(relative: str) -> FileResponse:
    path = (WEB_DIR / relative).resolve()
    if not path.is_relative_to(WEB_DIR) or path.suffix not in MEDIA_TYPES or not path.is_file():
        raise NotFoundError(f"no console file {relative}")
    return FileResponse(path, media_type=MEDIA_TYPES[path.suffix], headers=HEADERS)


@router.get("/console")
def console_redirect() -> RedirectResponse:
    # Relative, so it stays under the gateway's prefix (root_path) the browser used; the page's
    # own relative URLs (app.js, ../v1/...) then resolve from `/console/`.
    return RedirectResponse("console/", status_code=308)


@router.get("/console/")
def console_page() -> FileResponse:
    return _asset("index.html")


@router.get("/console/{name}")
def console_file(name: str) -> FileResponse:
    return _asset(name)


@router.get("/console/js/{name}")
def console_module(name: str) -> FileResponse:
    return _asset(f"js/{name}")
