"""Brand files for specs: a logo PNG or a font, uploaded once and named by content hash."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from jobs.pipeline.assets import upload

from .deps import RateLimited, ServicesDep

router = APIRouter()


@router.post("/assets", status_code=201, responses={413: {}, 422: {}})
async def create_asset(request: Request, _: RateLimited, svc: ServicesDep) -> dict[str, Any]:
    """The raw bytes of a PNG logo (≤ 4 MB, ≤ 4096 px a side) or a TrueType/OpenType font (≤ 24 MB). Answers
    ``{"id": "asset:<sha256>.<ext>"}``: use it as ``watermark.logo`` or ``font`` in clip and batch requests."""
    data = await request.body()
    return {"id": upload(svc.storage, data), "bytes": len(data)}
