"""``POST /links``: a signed clip link for one of the service's site keys, made as ``quoteclip sign --check`` makes
it (jobs/signing.py: the key's scopes, the service's source rules, its brand files), for a caller holding an API key
(an assistant's tool, a site's back office). Without the API's keys (QUOTECLIP_API_KEYS) it is refused: a stranger
never signs a link."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, HTTPException
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from jobs.signing import make_link, snapped
from quoteclip import links
from quoteclip.errors import BadInput
from quoteclip.spec import MAX_CAPTION_CHARS, MAX_SOURCE_CHARS, MAX_WORDS, Word

from ..deps import ServicesDep

router = APIRouter()


class LinkRequest(BaseModel):
    """What a link carries (quoteclip/links.py), the site key signing it, and how."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    site: str = Field(min_length=1, max_length=100)
    source: str = Field(min_length=1, max_length=MAX_SOURCE_CHARS)
    start: float = Field(ge=0)
    end: float = Field(ge=0)
    caption: str | None = Field(default=None, max_length=MAX_CAPTION_CHARS)
    watermark: str | None = Field(default=None, max_length=200)
    profile: str | None = Field(default=None, max_length=40)
    fit: str | None = Field(default=None, max_length=40)
    style: str | None = Field(default=None, max_length=40)
    quality: str | None = Field(default=None, max_length=40)
    variant: str = Field(default="clip", max_length=20)
    expires: int | None = None
    key_id: str | None = Field(default=None, max_length=100)
    base_url: str | None = Field(default=None, max_length=500)
    # snap: "words" moves the cut's ends to the nearest boundaries of ``words`` (the quote's, source seconds)
    snap: Literal["words"] | None = None
    words: list[Word] | None = Field(default=None, max_length=MAX_WORDS)


@router.post("/links", tags=["links"], responses={403: {}, 422: {}})
async def sign_link(request: LinkRequest, svc: ServicesDep) -> dict[str, Any]:
    """A signed link (``{"link", "site", "key_id", "variant", "expires", "warnings"}``); 422 naming what the service
    would refuse of it. Needs the API's keys (QUOTECLIP_API_KEYS)."""
    if not svc.settings.api_keys:
        raise HTTPException(403, "signing a link needs the API's keys (QUOTECLIP_API_KEYS): or use quoteclip sign")
    if request.variant not in links.VARIANTS:
        raise BadInput(f"variant must be one of {', '.join(links.VARIANTS)}, got {request.variant!r}")
    fields = request.model_dump(
        exclude={"site", "variant", "expires", "key_id", "base_url", "snap", "words"}, exclude_none=True
    )
    said: tuple[str, ...] = ()
    if request.snap is not None:
        if not request.words:
            raise BadInput("snap: words moves the cut's ends to word boundaries, so it needs the quote's words")
        fields, said = snapped(fields, request.words)
    if isinstance(fields.get("watermark"), str) and fields["watermark"].lower().endswith(".png"):
        fields["logo"] = fields.pop("watermark")  # a logo is an uploaded asset or a brand file, as sign takes it
    made = await run_in_threadpool(
        make_link,
        fields,
        request.site,
        svc.settings,
        variant=request.variant,
        key_id=request.key_id,
        expires=request.expires,
        base_url=request.base_url,
        check=True,
    )
    return {**made, "warnings": [*said, *made["warnings"]]}
