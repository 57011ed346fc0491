"""Handing a community over to another Commonroom, in the browser: the Danger zone's page
for the primary admin (what travels, what does not, the handle typed to confirm; the
bundle and its passphrase shown once, on the POST's own `no-store` answer, never after a
redirect), and the import of a bundle ("bring your own account": the bundle file and its
passphrase, a multipart form). Both go through the communities service, the same commands
the API and the CLI run (docs/communities.md, "Handing a community over")."""

from __future__ import annotations

import base64
from typing import Any

from daemon.plugin import ApiError
from plugins.web.admin import community_names, handle_confirmed, section_page
from plugins.web.base import FormErrors, PageHandler
from plugins.web.sections import PRIMARY
from plugins.web.shared import IDENT, community_path, community_row, signed_in_actor

#: Refusals of an import that are about the file or the passphrase (the service's words are shown).
_IMPORT_FIELDS = {"bundle_malformed": "bundle", "bundle_unsupported": "bundle", "bundle_too_large": "bundle",
                  "community_exists": "bundle", "bundle_credentials_refused": "bundle",
                  "bundle_refused": "passphrase", "bad_passphrase": "passphrase"}


class HandoverPage(PageHandler):
    """GET /c/<ident>/settings/handover: what a handover does, and the form (an optional
    address of the new instance, the handle typed to confirm); POST hands it over and
    answers the passphrase and the bundle's download once (primary admin only)."""

    login_required = True

    async def get(self, ident: str) -> None:
        row = await community_row(self, ident)
        await self.show(row, FormErrors())

    async def show(self, row: Any, errors: FormErrors, status: int = 200) -> None:
        _, layout = await section_page(self, row, "danger", PRIMARY,
                                       doing="hand the community over to another Commonroom")
        title = f"Hand {row['display_name']} over to another Commonroom"
        self.render_page("handover.html", title=("Error: " + title) if errors else title, status=status,
                         community=community_names(row, brought=row["account_kind"] == "brought"),
                         errors=errors, values=errors.values, **layout)

    async def submit(self, ident: str) -> None:
        row = await community_row(self, ident)
        values = {k: self.form.get(k, "").strip() for k in ("to", "confirmHandle")}
        errors = FormErrors(values=values)
        to = values["to"] or None
        if to is not None and (not to.startswith(("https://", "http://")) or " " in to or len(to) > 300):
            errors.add("to", "Enter the new instance's address, such as https://commonroom.example.org, "
                             "or leave it empty")
        if not handle_confirmed(self.form, row):
            errors.add("confirmHandle", f"Type the community's handle, {row['handle']}, to hand it over")
        if errors:
            await self.show(row, errors, 400)
            return
        try:
            answer = await self.communities.hand_over(row, signed_in_actor(self), to=to)
        except ApiError as exc:
            if exc.status in (401, 403) or exc.status >= 500 and exc.code != "pds_error":
                raise
            errors.general.append(exc.message)
            await self.show(row, errors, exc.status)
            return
        # The passphrase's one showing: the POST's own answer, never cached, never in a URL.
        self.put_header("Cache-Control", "no-store")
        bundle_b64 = base64.b64encode(answer["bundle"]).decode("ascii")
        self.render_page("handover_done.html", title=f"{row['display_name']} is handed over",
                         answer=answer, bundle_b64=bundle_b64, bundle_text=answer["bundle"].decode("utf-8"))


class ImportPage(PageHandler):
    """GET /new/import: bring a community handed over from another Commonroom (its bundle
    file and passphrase); POST imports it, then goes to its page."""

    login_required = True
    accepts_files = True  # the bundle file (daemon.plugin.PageHandler)

    def form_page(self) -> str:
        return "/new/import"

    def body_limit(self) -> int:
        # a bundle (JSON, base64 inside) with the multipart framing around it
        return self.app.config.server.max_upload_bytes + 64 * 1024

    async def get(self) -> None:
        self.show(FormErrors())

    def show(self, errors: FormErrors, status: int = 200) -> None:
        title = "Bring a community from another Commonroom"
        self.render_page("import.html", title=("Error: " + title) if errors else title, status=status,
                         errors=errors, values=errors.values,
                         allowed=self.app.config.plugin("communities").allow_bring_own)

    async def submit(self) -> None:
        errors = FormErrors()
        found = [f for f in self.files.get("bundle", []) if f["body"]]
        passphrase = self.form.get("passphrase", "")
        if not found:
            errors.add("bundle", "Choose the handover bundle file (it ends in .crhandover)")
        if not passphrase.strip():
            errors.add("passphrase", "Enter the passphrase that came with the bundle")
        if errors:
            self.show(errors, 400)
            return
        try:
            answer = await self.communities.import_bundle(found[0]["body"], passphrase, signed_in_actor(self))
        except ApiError as exc:
            if exc.code in _IMPORT_FIELDS:
                message = exc.message.rstrip(".")
                errors.add(_IMPORT_FIELDS[exc.code], message[:1].upper() + message[1:])
            elif exc.status in (401,) or exc.status >= 500 and exc.code != "pds_error":
                raise
            else:
                errors.general.append(exc.message)
            self.show(errors, exc.status)
            return
        row = await self.communities.community_row(answer["did"])
        self.see_other(community_path(row) + "?done=imported" if row else "/")


def routes() -> list[tuple]:
    return [
        (r"/c/" + IDENT + r"/settings/handover", HandoverPage),
        (r"/new/import", ImportPage),
    ]
