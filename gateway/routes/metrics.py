"""``GET /metrics`` and ``GET /metrics/targets``: what Prometheus scrapes, without a token.

``/metrics`` is the answering gateway process's own metrics (the gateway processes share one
port, so which process answers is the kernel's choice: scrape each through ``/metrics/targets``).
``/metrics/targets`` is Prometheus's ``http_sd`` format: every Mirror process serving metrics, on
every node (:func:`mirror.actors.metrics_targets.metrics_targets`). Neither names a conversation;
tenant names do appear as labels, so keep the gateway's port where tenants' own scrapers cannot
reach it, as Ray's ports are (docs/operations.md, "Metrics and traces").
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from mirror import metrics
from mirror.actors.metrics_targets import metrics_targets

__all__ = ["router"]

router = APIRouter()


@router.get("/metrics", response_class=Response)
async def scrape() -> Response:
    """This gateway process's metrics in Prometheus's text format."""
    body, content_type = metrics.exposition()
    return Response(body, media_type=content_type)


@router.get("/metrics/targets")
async def targets() -> list[dict[str, Any]]:
    """Every Mirror process that serves metrics, as Prometheus's ``http_sd_configs`` reads it."""
    return await metrics_targets()
