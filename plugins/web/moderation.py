"""The roles and bans pages of the settings area (docs/web.md, "Roles" and "Bans").

Roles (admins): the built-in and custom roles with what each may do in words and who
holds them; a form to create or edit a custom role (capabilities as checkboxes,
per-collection record rights as rows); deleting after a confirmation; giving and taking a
role from a member's actions menu. Bans (`members.ban`): the bans in force; banning from a
member's or a requester's row with a reason and an optional expiry; lifting a ban after a
confirmation. Every step calls the communities service (`app.communities`), the same
functions as the JSON routes; the rules (names, limits, who may ban whom) are the
service's, and its refusals are shown next to the field they are about.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any
from urllib.parse import urlencode

from daemon.plugin import is_did
from daemon.plugin import ApiError, encode_cursor
from daemon.plugin.http import decode_cursor
from daemon.plugin import iso
from daemon.plugin import DID_PATTERN
from plugins.web.admin import community_names, section_page
from plugins.web.base import FormErrors, PageHandler
from plugins.web.sections import ADMIN
from plugins.web.shared import IDENT, community_path, community_row, person_name, signed_in_actor

#: A role's name in a path (the service checks the real rule; this only bounds the URL).
ROLE = r"([a-z][a-z0-9-]{0,63})"
#: Per-collection rights, as the form's checkboxes name them.
RIGHTS = {"create": "records.create", "update": "records.update", "delete": "records.delete"}
#: Rows for per-collection rights shown on the form (filled ones plus two empty).
MAX_ROWS = 8
MAX_REASON = 1000
#: Ban expiry presets (form value -> days; "" means no end, "date" a chosen day).
PRESETS = {"1": 1, "7": 7, "30": 30}


def rights_words(catalogue: dict[str, Any], role: dict[str, Any]) -> list[str]:
    """What a role may do, one sentence part per capability or collection."""
    words = catalogue["capabilities"]
    out = [words[c] for c in role["capabilities"] if c in words and c not in catalogue["perCollection"]]
    for grant in role["collections"]:
        verbs = [c.split(".", 1)[1] for c in grant["capabilities"]]
        out.append(f"{', '.join(verbs)} records in {grant['collection']}")
    return out


def capability_groups(catalogue: dict[str, Any]) -> list[tuple[str | None, list[tuple[str, str]]]]:
    """The role form's checkboxes: the core's capabilities (heading None), then each other
    plugin's own under its name; per-collection ones are the form's collection rows."""
    groups: dict[str | None, list[tuple[str, str]]] = {None: []}
    for cap, words in catalogue["capabilities"].items():
        if cap not in catalogue["perCollection"]:
            groups.setdefault(catalogue.get("plugins", {}).get(cap) or None, []).append((cap, words))
    return list(groups.items())


# ------------------------------------------------------------------ roles


class RolesPage(PageHandler):
    """GET /c/<ident>/settings/roles: every role, what it may do, who holds it (admins)."""

    login_required = True

    async def get(self, ident: str) -> None:
        row = await community_row(self, ident)
        _, layout = await section_page(self, row, "roles", ADMIN, doing="manage roles")
        catalogue = self.communities.capability_catalogue()
        listed = (await self.communities.list_roles(row))["roles"]
        holders = await self.communities.role_holders(row)
        details = await self.communities.details(row, self.principal.did, None)
        admins = [a["did"] for a in details["community"].get("admins", [])]
        by_role: dict[str, list[str]] = {"admin": admins}
        for did, held in holders.items():
            for name in held:
                by_role.setdefault(name, []).append(did)
        roles = []
        for role in listed:
            dids = by_role.get(role["name"], [])
            names = [await person_name(self, d) for d in dids[:20]]
            can = ["everything, including what the other roles may do, and the settings"] \
                if role["name"] == "admin" else rights_words(catalogue, role)
            roles.append({**role, "can": can, "holders": names, "more_holders": max(0, len(dids) - 20)})
        self.render_page("roles.html", title=f"Roles of {row['display_name']}", community=community_names(row),
                         roles=roles, member_count=row["member_count"], max_roles=catalogue["maxRoles"],
                         **layout)


async def custom_role(handler: PageHandler, row: Any, name: str) -> dict[str, Any]:
    """A custom role of the community (404 page for a built-in or unknown name)."""
    for role in (await handler.communities.list_roles(row))["roles"]:
        if role["name"] == name and not role["builtin"]:
            return role
    raise ApiError(404, "role_not_found", f"No custom role {name} in this community.")


class RoleFormPage(PageHandler):
    """GET/POST /c/<ident>/settings/roles/new and …/roles/<name>/edit: a custom role's
    description, capabilities and per-collection rights (admins; the service checks)."""

    login_required = True

    async def get(self, ident: str, name: str | None = None) -> None:
        row = await community_row(self, ident)
        values: dict[str, Any] = {"name": "", "description": "", "capabilities": [], "rows": []}
        if name is not None:
            role = await custom_role(self, row, name)
            values = {"name": name, "description": role.get("description") or "",
                      "capabilities": role["capabilities"],
                      "rows": [{"collection": g["collection"],
                                "rights": [c.split(".", 1)[1] for c in g["capabilities"]]}
                               for g in role["collections"]]}
        await self.show(row, name, FormErrors(values=values))

    async def show(self, row: Any, name: str | None, errors: FormErrors, status: int = 200) -> None:
        _, layout = await section_page(self, row, "roles", ADMIN, doing="manage roles")
        catalogue = self.communities.capability_catalogue()
        values = errors.values
        rows = list(values.get("rows", []))[:MAX_ROWS]
        rows += [{"collection": "", "rights": []}] * min(2, MAX_ROWS - len(rows))
        title = f"Edit the role {name}" if name else "New role"
        groups = capability_groups(catalogue)
        offered = {c for _, caps in groups for c, _ in caps}
        self.render_page("role_form.html", title=("Error: " + title) if errors else title, status=status,
                         community=community_names(row), role_name=name, errors=errors, values=values,
                         rows=rows, groups=groups,
                         gone=[c for c in values.get("capabilities", []) if c not in offered],
                         max_description=catalogue["maxDescription"], **layout)

    async def submit(self, ident: str, name: str | None = None) -> None:
        row = await community_row(self, ident)
        if name is not None:
            await custom_role(self, row, name)
        values, body, errors = self.read_form(name)
        if not errors:
            try:
                if name is None:
                    await self.communities.create_role(row, signed_in_actor(self), values["name"], body)
                else:
                    await self.communities.update_role(row, signed_in_actor(self), name, body)
            except ApiError as exc:
                if exc.status not in (400, 409):
                    raise
                self.service_errors(exc, errors)
        if errors:
            await self.show(row, name, errors, 400)
            return
        done = "role_created" if name is None else "role_updated"
        self.see_other(f"{community_path(row)}/settings/roles?{urlencode({'done': done, 'role': values['name']})}")

    def read_form(self, name: str | None) -> tuple[dict[str, Any], dict[str, Any], FormErrors]:
        capabilities = [c for c in self.form_lists.get("capabilities", []) if c]
        rows: list[dict[str, Any]] = []
        for i in range(MAX_ROWS):
            collection = self.form.get(f"collection-{i}", "").strip()
            rights = [r for r in self.form_lists.get(f"rights-{i}", []) if r in RIGHTS]
            if collection or rights:
                rows.append({"collection": collection, "rights": rights, "index": len(rows)})
        values = {"name": name or self.form.get("name", "").strip(),
                  "description": self.form.get("description", "").strip(),
                  "capabilities": capabilities, "rows": rows}
        errors = FormErrors(values=values)
        if name is None and not values["name"]:
            errors.add("name", "Enter a name for the role, such as greeter")
        for i, r in enumerate(rows):
            if not r["collection"]:
                errors.add(f"collection-{i}", "Enter the collection these rights are for, such as "
                                              "com.example.post, or untick its rights")
            elif not r["rights"]:
                errors.add(f"rights-{i}", f"Tick at least one right for {r['collection']}, or clear the row")
        body = {"description": values["description"], "capabilities": capabilities,
                "collections": [{"collection": r["collection"], "capabilities": [RIGHTS[x] for x in r["rights"]]}
                                for r in rows]}
        return values, body, errors

    @staticmethod
    def service_errors(exc: ApiError, errors: FormErrors) -> None:
        """The service's refusal next to the field it names."""
        if exc.code in ("role_exists", "role_builtin"):
            errors.add("name", exc.message)
            return
        if exc.code == "too_many_roles":
            errors.general.append(exc.message)
            return
        for detail in exc.details or []:
            field = detail.get("field", "") if isinstance(detail, dict) else ""
            message = f"{field}: {detail.get('message', '')}" if isinstance(detail, dict) else exc.message
            found = re.match(r"collections\[(\d+)\](?:\.(\w+))?", field)
            if field in ("name", "description"):
                errors.add(field, f"The {field} {detail.get('message', 'is not valid')}")
            elif field.startswith("capabilities"):
                errors.add("capabilities", "Choose from the capabilities listed")
            elif found:
                i = found.group(1)
                if found.group(2) == "collection":
                    errors.add(f"collection-{i}", "Enter a collection NSID, such as com.example.post")
                else:
                    errors.add(f"rights-{i}", message)
            elif field == "collections":
                errors.general.append(message)
        if not errors:
            errors.general.append(exc.message)


class RoleDeletePage(PageHandler):
    """GET/POST /c/<ident>/settings/roles/<name>/delete: what deleting a custom role does
    (its holders lose it), confirmed on its own page."""

    login_required = True

    async def get(self, ident: str, name: str) -> None:
        row = await community_row(self, ident)
        _, layout = await section_page(self, row, "roles", ADMIN, doing="manage roles")
        holders = [d for d, held in (await self.communities.role_holders(row)).items() if name in held]
        await custom_role(self, row, name)
        self.render_page("confirm.html", title=f"Delete the role {name}?", community=community_names(row),
                         heading=f"Delete the role {name}?",
                         explain=[f"{len(holders)} member{'s' if len(holders) != 1 else ''} hold{'s' if len(holders) == 1 else ''} "
                                  f"it; they lose it, and what it allows, at once.",
                                  "The role's name can be used again for a new role."],
                         action=self.request.path, button=f"Delete the role {name}", danger=True,
                         cancel=f"{community_path(row)}/settings/roles", **layout)

    async def submit(self, ident: str, name: str) -> None:
        row = await community_row(self, ident)
        try:
            await self.communities.delete_role(row, signed_in_actor(self), name)
        except ApiError as exc:
            if exc.code != "role_not_found":  # deleted meanwhile: the list shows it gone
                raise
        self.see_other(f"{community_path(row)}/settings/roles?{urlencode({'done': 'role_deleted', 'role': name})}")


class RoleAssignAction(PageHandler):
    """POST /c/<ident>/members/<did>/roles (field `role`), and
    POST …/roles/<name>/remove: give or take a role, then back to the members page."""

    login_required = True

    def form_page(self) -> str:
        return self.request.path.split("/members/", 1)[0] + "/settings/members"

    async def submit(self, ident: str, member: str, name: str | None = None) -> None:
        row = await community_row(self, ident)
        member_did = self.communities.path_did(member)
        role = name or self.form.get("role", "")
        try:
            if name is None:
                await self.communities.assign_role(row, signed_in_actor(self), member_did, role)
                done = "role_assigned"
            else:
                await self.communities.unassign_role(row, signed_in_actor(self), member_did, role)
                done = "role_unassigned"
        except ApiError as exc:
            # a repeated post (already held, already taken): the page shows the state
            if exc.code not in ("role_already_held", "role_not_held"):
                raise
            done = ""
        query = {"done": done, "who": member_did, "role": role} if done else {}
        self.see_other(f"{community_path(row)}/settings/members" + (f"?{urlencode(query)}" if query else ""))


# ------------------------------------------------------------------ bans


class BansPage(PageHandler):
    """GET /c/<ident>/settings/bans: the bans in force, newest first (members.ban)."""

    login_required = True

    async def get(self, ident: str) -> None:
        row = await community_row(self, ident)
        cursor = self.get_query_argument("cursor", "") or ""
        before = None
        if cursor:
            before = decode_cursor(cursor, 1, "i")[0]
        listed = await self.communities.list_bans(row, signed_in_actor(self), limit=21, before_id=before)
        _, layout = await section_page(self, row, "bans", "members.ban", doing="manage bans")
        bans = []
        for ban in listed[:20]:
            bans.append({**ban, "who": ban["handle"] or ban["displayName"] or ban["memberDid"],
                         "by": await person_name(self, ban["bannedBy"]) if ban["bannedBy"] else "an app"})
        more = None
        if len(listed) > 20:
            more = f"{community_path(row)}/settings/bans?{urlencode({'cursor': encode_cursor([listed[19]['id']])})}"
        self.render_page("bans.html", title=f"Bans of {row['display_name']}", community=community_names(row),
                         bans=bans, more=more, paged=bool(cursor), **layout)


def expiry_of(values: dict[str, str], now: float, errors: FormErrors) -> str | None:
    """The ban's end from the form: a preset (days from now), a day (the ban lasts through
    that day, UTC), or none."""
    choice = values.get("expires", "")
    if choice in PRESETS:
        return iso(now + PRESETS[choice] * 86400)
    if choice == "date":
        try:
            day = dt.date.fromisoformat(values.get("until", ""))
        except ValueError:
            errors.add("until", "Enter the last day of the ban as a date, such as 2030-01-31")
            return None
        end = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=dt.timezone.utc).timestamp()
        if end <= now:
            errors.add("until", "Choose a day that has not ended yet: a ban cannot end in the past")
            return None
        if day.year > 9998:
            errors.add("until", "Choose a day before the year 9999")
            return None
        return iso(end)
    if choice not in ("", "none"):
        errors.add("expires", "Choose how long the ban lasts")
    return None


class BanPage(PageHandler):
    """GET /c/<ident>/settings/bans/new?who=<did>: ban a member or a requester, with a
    reason and an optional expiry; the POST bans (members.ban; the service checks who may
    ban whom), then the bans list."""

    login_required = True

    async def get(self, ident: str) -> None:
        row = await community_row(self, ident)
        who = self.get_query_argument("who", "") or ""
        await self.show(row, who, FormErrors(values={"expires": "7", "reason": "", "until": ""}))

    async def show(self, row: Any, who: str, errors: FormErrors, status: int = 200) -> None:
        _, layout = await section_page(self, row, "bans", "members.ban", doing="ban people")
        if not is_did(who):
            raise ApiError(404, "not_found", "Choose the person to ban from the members or the requests.")
        target = {"did": who, "name": await person_name(self, who)}
        title = f"Ban {target['name']}?"
        self.render_page("ban_form.html", title=("Error: " + title) if errors else title, status=status,
                         community=community_names(row), target=target, errors=errors, values=errors.values,
                         today=dt.datetime.fromtimestamp(self.app.clock.time(), dt.timezone.utc).date().isoformat(),
                         max_reason=MAX_REASON, **layout)

    async def submit(self, ident: str) -> None:
        row = await community_row(self, ident)
        who = self.form.get("memberDid", "")
        values = {k: self.form.get(k, "").strip() for k in ("reason", "expires", "until")}
        errors = FormErrors(values=values)
        if len(values["reason"]) > MAX_REASON:
            errors.add("reason", f"Shorten the reason to {MAX_REASON:,} characters or fewer")
        expires_at = expiry_of(values, self.app.clock.time(), errors)
        if not is_did(who):
            raise ApiError(404, "not_found", "Choose the person to ban from the members or the requests.")
        if not errors:
            try:
                await self.communities.ban_row(row, who, signed_in_actor(self), reason=values["reason"] or None,
                                           expires_at=expires_at)
            except ApiError as exc:
                if exc.status == 403 or exc.status >= 500 or exc.status == 401:
                    raise
                if exc.code == "invalid_request" and "expiresAt" in exc.message:
                    errors.add("until", "Choose a day that has not ended yet: a ban cannot end in the past")
                else:
                    errors.general.append(exc.message)
        if errors:
            await self.show(row, who, errors, 400)
            return
        self.see_other(f"{community_path(row)}/settings/bans?{urlencode({'done': 'banned', 'who': who})}")


class UnbanPage(PageHandler):
    """GET/POST /c/<ident>/bans/<did>/unban: "Lift the ban on <name>?", then the list."""

    login_required = True

    async def get(self, ident: str, member: str) -> None:
        row = await community_row(self, ident)
        _, layout = await section_page(self, row, "bans", "members.ban", doing="lift bans")
        did = self.communities.path_did(member)
        name = await person_name(self, did)
        ban = await self.communities.ban_of(row, did)
        if ban is None:
            raise ApiError(404, "not_banned", f"{name} is not banned from this community.")
        self.render_page("confirm.html", title=f"Lift the ban on {name}?", community=community_names(row),
                         heading=f"Lift the ban on {name}?",
                         explain=[f"{name} will be able to join, ask to join or use an invite again at once.",
                                  "They are not made a member: they join or ask again themselves."],
                         action=self.request.path, button=f"Lift the ban on {name}", danger=False,
                         cancel=f"{community_path(row)}/settings/bans", **layout)

    async def submit(self, ident: str, member: str) -> None:
        row = await community_row(self, ident)
        did = self.communities.path_did(member)
        try:
            await self.communities.unban(row, did, signed_in_actor(self))
            done = "unbanned"
        except ApiError as exc:
            if exc.code != "not_banned":
                raise
            done = "not_banned"
        self.see_other(f"{community_path(row)}/settings/bans?{urlencode({'done': done, 'who': did})}")


def routes() -> list[tuple]:
    base = r"/c/" + IDENT
    return [
        (base + r"/settings/roles", RolesPage),
        (base + r"/settings/roles/new", RoleFormPage),
        (base + r"/settings/roles/" + ROLE + r"/edit", RoleFormPage),
        (base + r"/settings/roles/" + ROLE + r"/delete", RoleDeletePage),
        (base + r"/members/" + DID_PATTERN + r"/roles", RoleAssignAction),
        (base + r"/members/" + DID_PATTERN + r"/roles/" + ROLE + r"/remove", RoleAssignAction),
        (base + r"/settings/bans", BansPage),
        (base + r"/settings/bans/new", BanPage),
        (base + r"/bans/" + DID_PATTERN + r"/unban", UnbanPage),
    ]
