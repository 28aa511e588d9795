"""The inspector's assets: what the page loads is what the package ships, served only by exact
name, with a policy that keeps the browser from fetching anything from elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from mirror.gateway.inspector import routes

STATIC = Path(routes.__file__).parent / "static"


def client() -> TestClient:
    app = FastAPI()
    app.include_router(routes.router)
    return TestClient(app)


def test_every_asset_the_page_and_its_modules_name_is_shipped_and_nothing_is_fetched_from_elsewhere() -> None:
    page = (STATIC / "index.html").read_text()
    named = set(re.findall(r'(?:src|href)="/inspector/assets/([^"]+)"', page))
    for script in STATIC.glob("js/*.js"):
        text = script.read_text()
        named |= {f"js/{name}" for name in re.findall(r'from "\./([^"]+)"', text)}
        addresses = set(re.findall(r"https?://[^\s\"'`]+", text)) - {"http://www.w3.org/2000/svg"}  # a namespace, not a fetch
        assert not addresses, f"{script.name} names an address elsewhere: {addresses}"
    assert "js/main.js" in named and "inspector.css" in named
    assert named <= set(routes.ASSETS), f"named but not shipped: {sorted(named - set(routes.ASSETS))}"
    assert not re.search(r'(?:src|href)="https?://', page)
    assert set(routes.ASSETS) == {str(path.relative_to(STATIC)) for path in STATIC.rglob("*") if path.is_file()}


def test_the_page_and_its_assets_are_served_with_their_types_and_policy() -> None:
    with client() as http:
        page = http.get("/inspector")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert page.headers["content-security-policy"] == routes.CONTENT_SECURITY_POLICY
        assert "default-src 'self'" in routes.CONTENT_SECURITY_POLICY and "connect-src 'self'" in routes.CONTENT_SECURITY_POLICY
        script = http.get("/inspector/assets/js/api.js")
        assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
        assert script.content == (STATIC / "js" / "api.js").read_bytes()
        assert http.get("/inspector/assets/inspector.css").headers["content-type"].startswith("text/css")


def test_only_shipped_assets_are_served() -> None:
    with client() as http:
        for name in ("nope.js", "../routes.py", "..%2Froutes.py", "js/../../routes.py", "%2e%2e/__init__.py"):
            answer = http.get(f"/inspector/assets/{name}")
            assert answer.status_code == 404, name
