"""The developer pages: my apps (register, the key shown once, rotate, deactivate, the rate
limit) and each app's webhooks (create, edit, delete, rotate the secret, the delivery log,
redeliver). Every form calls the same service as the JSON routes:
`plugins/apikeys/service.py` for apps and `plugins/webhooks/service.py` for webhooks (the
web plugin's declared dependencies on those two plugins, docs/web.md).

A secret (API key, signing secret) is shown once, as the POST's own answer (200,
`Cache-Control: no-store`), never after a redirect: it must not go in a URL and is not
kept anywhere it could be shown again."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

from daemon.plugin import ApiError, encode_cursor
from daemon.plugin.http import decode_cursor
from plugins.web import queries
from plugins.web.dates import when  # noqa: F401 (pages pass it to templates)
from plugins.web.base import FormErrors, PageHandler

APP_ID = r"(app_[0-9a-f]{16})"
WEBHOOK_ID = r"(wh_[0-9a-f]{16})"
DELIVERIES_PER_PAGE = 20

#: What a form post did, shown on the page it returns to (`?done=`).
NOTICES = {
    "deactivated": "The app is deactivated. Its key no longer works.",
    "limit": "The rate limit is saved.",
    "limit_reset": "The app uses the service's rate limit again.",
    "webhook_saved": "The webhook is saved.",
    "webhook_deleted": "The webhook was deleted. Nothing more will be sent to it.",
    "redelivered": "The event was queued to be sent again. Its delivery is at the top of the log.",
}


def event_words(app: Any) -> dict[str, str]:
    """What each event kind means, in words (the checkboxes' labels): every kind the
    plugins declared (`cr_event_kinds`), with its label."""
    return {name: kind.words for name, kind in app.event_kinds.items()}


_APP_WORDS = {
    "name": "Enter a name for the app, 3 to 100 characters",
    "domain": "Enter the app's domain name, such as app.example.com",
}
_CONCURRENCY = re.compile(r"[0-9]{1,2}")   # ASCII digits: int() also takes other scripts'
_HOOK_WORDS = {
    "url": "Enter the address to send events to, starting with https://",
    "events": "Choose at least one event",
    "community": "Enter the handle or DID of a community this app can see, or leave it empty",
}


def field_errors(exc: ApiError, words: dict[str, str], errors: FormErrors) -> None:
    """A service's 400 as errors next to the fields it names, in words."""
    for detail in exc.details or []:
        name = detail.get("field") if isinstance(detail, dict) else None
        if name in words:
            errors.add(name, words[name])
    if not errors:
        errors.general.append(exc.message)


def limit_words(rate: dict[str, Any]) -> str:
    seconds = rate["windowMs"] / 1000
    return f"{rate['maxRequests']} requests per {seconds:g} seconds"


class DeveloperPage(PageHandler):
    """Signed in only; the title gets "Error: " when the form has mistakes."""

    login_required = True

    def show(self, template: str, title: str, errors: FormErrors | None = None, status: int = 200,
             **values: Any) -> None:
        if errors is None:
            errors = FormErrors()
        self.render_page(template, title=("Error: " + title) if errors else title, status=status,
                         errors=errors, values=errors.values, event_words=event_words(self.app), when=when,
                         notice=NOTICES.get(self.get_query_argument("done", "")), **values)

    def show_secret(self, *, title: str, kind: str, secret: str, onwards: str, **values: Any) -> None:
        """The one page a secret appears on: the POST's answer, never cached or stored."""
        self.put_header("Cache-Control", "no-store")
        values.setdefault("rotated", False)
        values.setdefault("old_until", None)
        self.show("dev_secret.html", title, kind=kind, secret=secret, onwards=onwards, **values)

    def webhooks_on(self) -> bool:
        """The webhooks plugin is optional for the pages (`OPTIONAL_PLUGINS`): without it,
        an app's page shows no webhooks and the webhook pages are not found."""
        return self.app.pm.has_plugin("webhooks")

    async def my_app(self, app_id: str) -> dict[str, Any]:
        assert self.principal is not None
        row = await self.apps.owned_app(self.principal.did, app_id)
        out = self.apps.app_json(row, self.apps.default_limit())
        out["limitWords"] = limit_words(out["rateLimit"])
        return out


# ------------------------------------------------------------------ apps


class AppsPage(DeveloperPage):
    """GET /apps: my apps, and the form to register one; POST registers (200: the key)."""

    def form_page(self) -> str:
        return "/apps"

    async def get(self) -> None:
        await self.list_page(FormErrors())

    async def list_page(self, errors: FormErrors, status: int = 200) -> None:
        assert self.principal is not None
        rows = await self.apps.list_apps(self.principal.did, 200, None)
        default = self.apps.default_limit()
        mine = [self.apps.app_json(r, default) for r in rows]
        mine.sort(key=lambda a: (not a["active"], a["name"].lower()))
        self.show("dev_apps.html", "My apps", errors, status, apps=mine,
                  most=self.app.config.plugin("apikeys").max_apps_per_owner)

    async def submit(self) -> None:
        assert self.principal is not None
        values = {k: self.form.get(k, "").strip() for k in ("name", "domain")}
        errors = FormErrors(values=values)
        for name in ("name", "domain"):  # each field on its own, so both can be reported
            try:
                self.apps.app_fields({name: values[name]}, required=False)
            except ApiError:
                errors.add(name, _APP_WORDS[name])
        if errors:
            await self.list_page(errors, 400)
            return
        try:
            row, key = await self.apps.register(self.principal.did,
                                                **self.apps.app_fields(values, required=True))
        except ApiError as exc:
            if exc.status not in (400, 409):
                raise
            if exc.code == "domain_taken":
                errors.add("domain", "You already have an active app for this domain: use it, or deactivate it first")
            else:
                field_errors(exc, _APP_WORDS, errors)
            await self.list_page(errors, 400 if exc.status == 400 else 409)
            return
        self.show_secret(title=f"{row['name']} is registered", kind="key", secret=key,
                         onwards="/apps/" + row["id"], app=self.apps.app_json(row, self.apps.default_limit()))


class AppPage(DeveloperPage):
    """GET /apps/<id>: the app, its rate limit, its webhooks; links to rotate and deactivate."""

    async def get(self, app_id: str) -> None:
        await show_app(self, app_id, FormErrors())


async def show_app(handler: DeveloperPage, app_id: str, errors: FormErrors, status: int = 200) -> None:
    """The app's page (also the rate-limit form's page when it has mistakes)."""
    app = await handler.my_app(app_id)
    most, webhooks = 0, None
    if handler.webhooks_on():
        most, webhooks = handler.webhooks.settings().max_webhooks_per_app, []
        for row in await handler.webhooks.list_webhooks(app_id, most, None):
            hook = handler.webhooks.webhook_json(row)
            hook["community"] = await community_label(handler, hook["communityDid"])
            webhooks.append(hook)
    default_requests, default_window = handler.apps.default_limit()
    if not errors.values:
        errors.values = {"maxRequests": str(app["rateLimit"]["maxRequests"]),
                         "windowSeconds": f"{app['rateLimit']['windowMs'] / 1000:g}"}
    handler.show("dev_app.html", app["name"], errors, status, app=app, webhooks=webhooks,
                 default_words=f"{default_requests} requests per {default_window:g} seconds",
                 max_webhooks=most)


class RateLimitAction(DeveloperPage):
    """POST /apps/<id>/rate-limit: a lower limit (`maxRequests` per `windowSeconds`), or
    `reset=yes` for the service's own."""

    def form_page(self) -> str:
        return self.request.path.rsplit("/", 1)[0]

    async def submit(self, app_id: str) -> None:
        assert self.principal is not None
        if self.form.get("reset") == "yes":
            await self.apps.set_rate_limit(self.principal.did, app_id, None, None)
            self.see_other(f"/apps/{app_id}?done=limit_reset#limit")
            return
        values = {k: self.form.get(k, "").strip() for k in ("maxRequests", "windowSeconds")}
        errors = FormErrors(values=values)
        requests = window = None
        if not values["maxRequests"].isdigit() or not 1 <= int(values["maxRequests"]) <= 1_000_000:
            errors.add("maxRequests", "Enter the number of requests as a whole number, 1 or more")
        else:
            requests = int(values["maxRequests"])
        if not values["windowSeconds"].isdigit() or not 1 <= int(values["windowSeconds"]) <= 86_400:
            errors.add("windowSeconds", "Enter the time window in whole seconds, from 1 to 86400 (a day)")
        else:
            window = float(values["windowSeconds"])
        if not errors:
            try:
                await self.apps.set_rate_limit(self.principal.did, app_id, requests, window)
            except ApiError as exc:
                if exc.code != "limit_above_default":
                    raise
                errors.add("maxRequests", "The app's own limit can only be lower than the service's; "
                                          "ask the people who run this service to raise it")
        if errors:
            await show_app(self, app_id, errors, 400)
            return
        self.see_other(f"/apps/{app_id}?done=limit#limit")


class RotateKeyPage(DeveloperPage):
    """GET /apps/<id>/rotate: "Make a new key?"; POST rotates (200: the new key)."""

    async def get(self, app_id: str) -> None:
        app = await self.my_app(app_id)
        self.show("dev_confirm.html", f"Make a new key for {app['name']}?", app=app, hook=None, action="rotate", overlap=0)

    async def submit(self, app_id: str) -> None:
        assert self.principal is not None
        row, key = await self.apps.rotate_key(self.principal.did, app_id)
        self.show_secret(title=f"A new key for {row['name']}", kind="key", secret=key,
                         onwards="/apps/" + row["id"], app=self.apps.app_json(row, self.apps.default_limit()),
                         rotated=True)


class DeactivatePage(DeveloperPage):
    """GET /apps/<id>/deactivate: what deactivating does; POST deactivates."""

    async def get(self, app_id: str) -> None:
        app = await self.my_app(app_id)
        self.show("dev_confirm.html", f"Deactivate {app['name']}?", app=app, hook=None, action="deactivate", overlap=0)

    async def submit(self, app_id: str) -> None:
        assert self.principal is not None
        await self.apps.deactivate(self.principal.did, app_id)
        self.see_other(f"/apps/{app_id}?done=deactivated")


# ------------------------------------------------------------------ webhooks


async def community_label(handler: PageHandler, did: str | None) -> str | None:
    """A webhook's community as a person reads it: its handle (or the DID if unknown)."""
    if did is None:
        return None
    row = await handler.communities.community_row(did)
    return row["handle"] if row is not None and row["handle"] else did


class WebhooksOnly(DeveloperPage):
    """A webhook page: not found while the webhooks plugin is disabled."""

    async def prepare(self) -> None:
        await super().prepare()
        if not self.webhooks_on():
            raise ApiError(404, "not_found", "Webhooks are not enabled on this service.")


class WebhookForm(WebhooksOnly):
    """What creating and editing share: reading the form into the service's terms."""

    async def read_form(self, app_id: str) -> tuple[FormErrors, dict[str, Any]]:
        kinds = self.app.event_kinds
        chosen = [e for e in self.form_lists.get("events", []) if e in kinds]
        values: dict[str, Any] = {"url": self.form.get("url", "").strip(), "events": chosen,
                                  "community": self.form.get("community", "").strip().lstrip("@"),
                                  "active": self.form.get("active", "")}
        raw_concurrency = self.form.get("concurrency")
        if raw_concurrency is not None:
            values["concurrency"] = raw_concurrency.strip()
        errors = FormErrors(values=values)
        out: dict[str, Any] = {}
        if not values["url"]:
            errors.add("url", _HOOK_WORDS["url"])
        else:
            try:
                out["url"] = await self.webhooks.checked_url({"url": values["url"]}, required=True)
            except ApiError as exc:
                reason = (exc.details or [{}])[0].get("message", exc.message)
                errors.add("url", f"This address cannot receive webhooks: {reason}")
        if not chosen:
            errors.add("events", _HOOK_WORDS["events"])
        out["events"] = chosen
        out["community_did"] = None
        if values["community"]:
            did = await queries.community_did_of(self.app, values["community"])
            if did is None:
                errors.add("community", "There is no community " + values["community"] + " on this service")
            out["community_did"] = did
        if raw_concurrency is not None:   # absent (an older form): the default, or as it was
            if not _CONCURRENCY.fullmatch(values["concurrency"]) \
                    or not 1 <= int(values["concurrency"]) <= self.webhooks.max_concurrency:
                errors.add("concurrency", "Enter how many requests at once as a whole number from 1 to "
                                          f"{self.webhooks.max_concurrency}")
            else:
                out["concurrency"] = int(values["concurrency"])
        return errors, out

    def community_refused(self, errors: FormErrors, exc: ApiError) -> None:
        if exc.code != "community_not_found":
            raise exc
        errors.add("community", "This app cannot see that community (it is private and has not "
                                "granted the app access)")


class NewWebhookPage(WebhookForm):
    """GET /apps/<id>/webhooks/new: the form; POST creates (200: the signing secret)."""

    async def get(self, app_id: str) -> None:
        app = await self.my_app(app_id)
        self.show("dev_webhook_new.html", f"New webhook for {app['name']}", app=app)

    async def submit(self, app_id: str) -> None:
        app = await self.my_app(app_id)
        errors, fields = await self.read_form(app_id)
        if not errors:
            try:
                row, secret = await self.webhooks.create(app_id, **fields)
            except ApiError as exc:
                if exc.code == "too_many_webhooks":
                    errors.general.append(exc.message)
                else:
                    self.community_refused(errors, exc)
        if errors:
            self.show("dev_webhook_new.html", f"New webhook for {app['name']}", errors, 400, app=app)
            return
        self.show_secret(title="The webhook is ready", kind="secret", secret=secret,
                         onwards=f"/apps/{app_id}/webhooks/{row['id']}", app=app,
                         webhook=self.webhooks.webhook_json(row))


class WebhookPage(WebhookForm):
    """GET /apps/<id>/webhooks/<wh>: the settings form, the delivery log (`?cursor=`)
    with Redeliver; POST saves the settings."""

    async def get(self, app_id: str, webhook_id: str) -> None:
        await self.webhook_page(app_id, webhook_id, FormErrors())

    async def webhook_page(self, app_id: str, webhook_id: str, errors: FormErrors, status: int = 200) -> None:
        app = await self.my_app(app_id)
        hook = self.webhooks.webhook_json(await self.webhooks.owned(app_id, webhook_id))
        hook["community"] = await community_label(self, hook["communityDid"])
        cursor = self.get_query_argument("cursor", None)
        before = int(decode_cursor(cursor, 1, "i")[0]) if cursor else None
        rows = await self.webhooks.list_deliveries(app_id, webhook_id, DELIVERIES_PER_PAGE + 1, before, None)
        deliveries = [self.webhooks.delivery_json(r) for r in rows[:DELIVERIES_PER_PAGE]]
        more = None
        if len(rows) > DELIVERIES_PER_PAGE:
            more = f"?{urlencode({'cursor': encode_cursor([rows[DELIVERIES_PER_PAGE - 1]['id']])})}#deliveries"
        if not errors.values:
            errors.values = {"url": hook["url"], "events": hook["events"], "community": hook["community"] or "",
                             "active": "yes" if hook["active"] else "", "concurrency": str(hook["concurrency"])}
        self.show("dev_webhook.html", f"Webhook {hook['url']}", errors, status, app=app, hook=hook,
                  deliveries=deliveries, more=more,
                  counts=await self.webhooks.delivery_counts(webhook_id))

    async def submit(self, app_id: str, webhook_id: str) -> None:
        await self.webhooks.owned(app_id, webhook_id)
        errors, fields = await self.read_form(app_id)
        if not errors:
            try:
                await self.webhooks.update(app_id, webhook_id, active=self.form.get("active") == "yes", **fields)
            except ApiError as exc:
                self.community_refused(errors, exc)
        if errors:
            await self.webhook_page(app_id, webhook_id, errors, 400)
            return
        self.see_other(f"/apps/{app_id}/webhooks/{webhook_id}?done=webhook_saved")


class RotateSecretPage(WebhooksOnly):
    """GET /apps/<id>/webhooks/<wh>/rotate: confirm; POST rotates (200: the new secret)."""

    async def get(self, app_id: str, webhook_id: str) -> None:
        app = await self.my_app(app_id)
        hook = self.webhooks.webhook_json(await self.webhooks.owned(app_id, webhook_id))
        overlap = self.webhooks.settings().secret_overlap_seconds
        self.show("dev_confirm.html", "Make a new signing secret?", app=app, hook=hook,
                  action="rotate_secret", overlap=overlap)

    async def submit(self, app_id: str, webhook_id: str) -> None:
        app = await self.my_app(app_id)
        row, secret, old_until = await self.webhooks.rotate_secret(app_id, webhook_id)
        self.show_secret(title="A new signing secret", kind="secret", secret=secret,
                         onwards=f"/apps/{app_id}/webhooks/{webhook_id}", app=app,
                         webhook=self.webhooks.webhook_json(row), old_until=old_until, rotated=True)


class DeleteWebhookPage(WebhooksOnly):
    """GET /apps/<id>/webhooks/<wh>/delete: confirm; POST deletes."""

    async def get(self, app_id: str, webhook_id: str) -> None:
        app = await self.my_app(app_id)
        hook = self.webhooks.webhook_json(await self.webhooks.owned(app_id, webhook_id))
        self.show("dev_confirm.html", "Delete this webhook?", app=app, hook=hook, action="delete_webhook", overlap=0)

    async def submit(self, app_id: str, webhook_id: str) -> None:
        await self.my_app(app_id)
        await self.webhooks.delete(app_id, webhook_id)
        self.see_other(f"/apps/{app_id}?done=webhook_deleted#webhooks")


class DeliveryPage(WebhooksOnly):
    """GET /apps/<id>/webhooks/<wh>/deliveries/<n>: one delivery: the JSON body that was
    sent (signed; the same bytes on every attempt) and the receiver's answer to the last
    attempt (status, the first 2 KB of its body)."""

    async def get(self, app_id: str, webhook_id: str, delivery_id: str) -> None:
        import json

        app = await self.my_app(app_id)
        hook = self.webhooks.webhook_json(await self.webhooks.owned(app_id, webhook_id))
        detail = await self.webhooks.delivery_detail(app_id, webhook_id, int(delivery_id))
        payload = None
        if detail["payload"] is not None:
            payload = json.dumps(json.loads(detail["payload"]), indent=2, ensure_ascii=False)
        self.show("dev_delivery.html", f"Delivery {detail['deliveryId']}", app=app, hook=hook, d=detail,
                  payload=payload)


class RedeliverAction(WebhooksOnly):
    """POST /apps/<id>/webhooks/<wh>/deliveries/<n>/redeliver: send that event again."""

    def form_page(self) -> str:
        return self.request.path.split("/deliveries/", 1)[0]

    async def submit(self, app_id: str, webhook_id: str, delivery_id: str) -> None:
        await self.my_app(app_id)
        await self.webhooks.redeliver(app_id, webhook_id, int(delivery_id))
        self.see_other(f"/apps/{app_id}/webhooks/{webhook_id}?done=redelivered#deliveries")


def routes() -> list[tuple]:
    app = r"/apps/" + APP_ID
    hook = app + r"/webhooks/" + WEBHOOK_ID
    return [
        (r"/apps", AppsPage),
        (app, AppPage),
        (app + r"/rate-limit", RateLimitAction),
        (app + r"/rotate", RotateKeyPage),
        (app + r"/deactivate", DeactivatePage),
        (app + r"/webhooks/new", NewWebhookPage),
        (hook, WebhookPage),
        (hook + r"/rotate", RotateSecretPage),
        (hook + r"/delete", DeleteWebhookPage),
        (hook + r"/deliveries/(\d{1,18})", DeliveryPage),
        (hook + r"/deliveries/(\d{1,18})/redeliver", RedeliverAction),
    ]
