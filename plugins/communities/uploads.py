"""Avatar and banner uploads as one path for the JSON route
(`POST /communities/:did/avatar|banner`) and the settings page: the image is decoded and
re-encoded by `images.clean_image`, stored as a blob in the community's repo, and named in
its profile (`lifecycle.update_profile`). "Use my own banner" fetches the person's Bluesky
banner first, bounded in size and time.

The web pages reach `set_image` and `profile_banner` through the communities service."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from daemon.plugin import ApiError, Row
from daemon.plugin.atproto import pds
from plugins.communities import lifecycle, steps
from plugins.communities.images import clean_image
from plugins.communities.steps import Actor

if TYPE_CHECKING:
    from daemon.plugin import Application

KINDS = ("avatar", "banner")


async def set_image(app: "Application", community: Row, actor: Actor, kind: str, data: bytes) -> None:
    """Make `data` the community's `kind` ("avatar" or "banner"): 413 past
    `communities.max_upload_bytes` or the caps, 415 for what is not a PNG or JPEG, 502 when
    the PDS fails (nothing named in the profile then)."""
    await app.check_action("community.update", actor.did, community_did=community["did"], app_id=actor.app_id)
    limit = app.config.plugin("communities").max_upload_bytes
    if len(data) > limit:
        raise ApiError(413, "payload_too_large", f"The image is larger than {limit} bytes.")
    image = await clean_image(data, kind, limit)
    repo = await steps.community_repo_for(app, community["did"])
    blob = await pds(repo.upload_blob(image.data, image.mime))
    from daemon.plugin.atproto import blob_cid
    await lifecycle.update_profile(app, community, actor,
                                 **{kind: (blob_cid(blob), image.mime, len(image.data))})


async def profile_banner(app: "Application", user_did: str) -> bytes:
    """The user's own Bluesky banner, streamed: at most `max_upload_bytes` are read (413
    beyond), and the whole fetch is bounded by `communities.banner_fetch_timeout_seconds`.
    404 `no_profile_banner` when their profile has none."""
    from daemon.plugin.atproto import read_user_profile
    profile = await pds(read_user_profile(app, user_did))
    url = (profile or {}).get("banner")
    if not url:
        raise ApiError(404, "no_profile_banner", "Your profile has no banner to reuse.")
    cfg = app.config.plugin("communities")
    limit = cfg.max_upload_bytes

    async def fetch() -> bytes:
        async with app.http.stream("GET", url) as resp:
            if resp.status_code != 200:
                raise ApiError(502, "pds_error", f"Your PDS answered {resp.status_code} for your banner.")
            declared = resp.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > limit:
                raise ApiError(413, "payload_too_large",
                               f"Your profile banner is larger than {limit} bytes; upload a smaller image.")
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, "payload_too_large",
                                   f"Your profile banner is larger than {limit} bytes; upload a smaller image.")
                chunks.append(chunk)
            return b"".join(chunks)

    try:
        return await asyncio.wait_for(fetch(), cfg.banner_fetch_timeout_seconds)
    except ApiError:
        raise
    except asyncio.TimeoutError:
        raise ApiError(502, "pds_error", "Your PDS took too long to send your banner.") from None
    except Exception as exc:  # noqa: BLE001
        raise ApiError(502, "pds_error", f"Could not fetch your banner: {exc}") from None
