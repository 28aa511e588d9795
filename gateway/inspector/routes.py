"""``GET /inspector``: the page, and ``GET /inspector/assets/{name}``: its stylesheet and scripts.

The page carries no data (each view asks the JSON API with the user's token), so serving it needs
no token. Only the files shipped in ``static/`` are served, by exact name; anything else is a 404.
"""

from __future__ import annotations

from importlib import resources
from pathlib import PurePosixPath

from fastapi import APIRouter, HTTPException
from fastapi.responses import Response

__all__ = ["ASSETS", "CONTENT_SECURITY_POLICY", "router"]

router = APIRouter(include_in_schema=False)

STATIC = resources.files(__package__) / "static"
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
               ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
CONTENT_SECURITY_POLICY = ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                           "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
"""Everything the page loads or asks comes from the gateway that served it: nothing from elsewhere."""
HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "Referrer-Policy": "no-referrer",
           "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}


def _shipped() -> dict[str, bytes]:
    """Every asset under ``static/`` by its path there (``js/api.js``), read once at import."""
    found: dict[str, bytes] = {}

    def walk(folder: object, prefix: str) -> None:
        for entry in folder.iterdir():  # type: ignore[attr-defined]  # a Traversable
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            elif PurePosixPath(entry.name).suffix in MEDIA_TYPES:
                found[f"{prefix}{entry.name}"] = entry.read_bytes()

    walk(STATIC, "")
    return found


ASSETS = _shipped()


def _serve(name: str) -> Response:
    body = ASSETS.get(name)
    if body is None:
        raise HTTPException(404, f"the inspector has no asset {name!r}")
    return Response(body, media_type=MEDIA_TYPES[PurePosixPath(name).suffix], headers=HEADERS)


@router.get("/inspector")
async def page() -> Response:
    """The inspector's page (docs/inspector.md)."""
    return _serve("index.html")


@router.get("/inspector/assets/{name:path}")
async def asset(name: str) -> Response:
    return _serve(name)
