"""The settings page's pictures: upload an avatar or banner (a multipart form with the
hidden CSRF field; works without JavaScript, which only adds a preview), or use my own
Bluesky banner. Both go through the communities plugin's upload path
(`plugins/communities/uploads.py`: decoded, capped and re-encoded there, then stored in the
community's repo), the same one `POST /communities/:did/avatar|banner` takes."""

from __future__ import annotations

from typing import Any

from daemon.plugin import ApiError
from plugins.web.admin import row_profile, show_pictures
from plugins.web import sections
from plugins.web.base import FormErrors, PageHandler
from plugins.web.sections import ADMIN
from plugins.web.shared import IDENT, community_path, community_row, signed_in_actor

#: Refusals of an image, in words, by error code.
_IMAGE_WORDS = {
    "unsupported_image": "The file must be a PNG or JPEG image",
    "image_too_large": None,        # the service's message names the size and the caps
    "payload_too_large": None,
    "no_profile_banner": "Your own profile has no banner to use",
}


class PictureAction(PageHandler):
    """POST /c/<ident>/settings/(avatar|banner): the form's file `image`; for the banner
    `fromProfile=yes` uses the person's own Bluesky banner instead. Then back (303)."""

    login_required = True
    accepts_files = True  # the form's file (daemon.plugin.PageHandler)

    def body_limit(self) -> int:
        # room for the multipart framing around an image of the allowed size
        return self.app.config.plugin("communities").max_upload_bytes + 16 * 1024

    def form_page(self) -> str:
        return self.request.path.rsplit("/", 1)[0] + "/pictures"

    async def submit(self, ident: str, kind: str) -> None:
        assert self.principal is not None
        row = await community_row(self, ident)
        await sections.require(self, row, ADMIN, doing="change the pictures")
        me = signed_in_actor(self)
        errors = FormErrors(values=row_profile(self, row))
        try:
            if kind == "banner" and self.form.get("fromProfile") == "yes":
                data = await self.communities.profile_banner(self.principal.did)
            else:
                found = [f for f in self.files.get("image", []) if f["body"]]
                if not found:
                    errors.add(kind, f"Choose an image file for the {kind}")
                    await show_pictures(self, row, errors, 400)
                    return
                data = found[0]["body"]
            await self.communities.set_image(row, me, kind, data)
        except ApiError as exc:
            if exc.code not in _IMAGE_WORDS:
                raise
            errors.add(kind, _IMAGE_WORDS[exc.code] or exc.message.rstrip("."))
            await show_pictures(self, row, errors, exc.status)
            return
        self.see_other(f"{community_path(row)}/settings/pictures?done={kind}")


def routes() -> list[tuple]:
    return [(r"/c/" + IDENT + r"/settings/(avatar|banner)", PictureAction)]
