"""``GET /healthz``: the one route without a token, for load balancers and `mirror up`."""

from __future__ import annotations

from fastapi import APIRouter

__all__ = ["router"]

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
