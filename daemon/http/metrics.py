"""Prometheus metrics (docs/operations.md, "Metrics").

One registry per Application (never the process-global one, so tests and several apps in
one process do not mix). The core counts requests by route template, method and status
with a latency histogram, rate-limit refusals, PDS calls and the database's size; plugins
add their own through the `cr_metrics` hook (the webhooks plugin adds its queue).

Recording is on the hot path of every request, so it is one dict lookup and a few plain
integer increments: the request counter, the latency histogram and the serving-path counter
are kept as numbers per (route, method, status) and turned into the same Prometheus
families at scrape time (`_RequestStats`); a prometheus_client Histogram's `observe` and a
Counter's `inc` (a lock each, exemplar handling) cost ~20,000 instructions a request.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.utils import floatToGoString

from daemon.http.base import ApiError, BaseHandler
from daemon.http.openapi import Response, header, operation
from daemon.http.routing import pattern_groups, pattern_literal

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_PDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
UNMATCHED = "unmatched"
#: The `path` label of `commonroom_http_serving_path_total` for a Tornado RequestHandler
#: (the lean routes say ``lean`` or ``lean_task``, daemon/http/lean.py).
HANDLER_PATH = "handler"

Refresh = Callable[[], Awaitable[None]]


def route_template(pattern: str) -> str:
    """A route's regular expression as a readable template:
    ``/api/v1/communities/{did}/members/{action}`` (the label of its requests)."""
    out, pos = [], 0
    for start, end in pattern_groups(pattern):
        out.append(pattern_literal(pattern[pos:start]))
        out.append("{" + _group_name(pattern[start:end]) + "}")
        pos = end
    out.append(pattern_literal(pattern[pos:]))
    return "".join(out)


def _group_name(group: str) -> str:
    named = re.match(r"\(\?P<(\w+)>", group)
    if named:
        return named.group(1)
    for prefix, name in (("(did", "did"), ("(app_", "appId"), ("(wh_", "webhookId"), ("(\\d", "id")):
        if group.startswith(prefix):
            return name
    inner = group[1:-1]
    if re.fullmatch(r"[\w-]+(\|[\w-]+)+", inner):
        return "|".join(inner.split("|"))
    return "param"


class Metrics:
    """The application's metrics: `record_request` and friends for the core, `registry`
    for plugins (through `cr_metrics`)."""

    def __init__(self, app: "Application") -> None:
        self.app = app
        self.enabled = app.config.metrics.enabled
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        #: commonroom_http_requests_total and commonroom_http_request_duration_seconds,
        #: as plain numbers exposed at scrape time (module doc).
        self.request_stats = _RequestStats()
        r.register(self.request_stats)
        #: (route, path) -> [count]: plain integers, exposed at scrape time (`_ServingPaths`),
        #: because a prometheus Counter's inc costs ~3,000 instructions a request.
        self.serving_paths: dict[tuple[str, str], list[int]] = {}
        r.register(_ServingPaths(self.serving_paths))
        self.rate_limited = Counter("commonroom_rate_limited",
                                    "Requests refused by a rate limit (429), by limit.", ["limit"], registry=r)
        self.pds_requests = Counter("commonroom_pds_requests",
                                    "Outbound calls to PDSes, PLC and handle hosts (each attempt).",
                                    ["call", "outcome"], registry=r)
        self.pds_latency = Histogram("commonroom_pds_request_duration_seconds",
                                     "Duration of one outbound attempt.", ["call"], buckets=_PDS_BUCKETS,
                                     registry=r)
        self.db_bytes = Gauge("commonroom_database_bytes", "Size of the SQLite files.", ["file"], registry=r)
        self.connections_refused = Counter(
            "commonroom_connections_refused", "Connections refused over a per-address cap (429).", registry=r)
        self.accept_failures = Counter(
            "commonroom_accept_failures", "Failed accepts of new connections (no files left ...).", registry=r)
        self._seen = {"refused": 0, "accept_failures": 0}
        self._routes: dict[type, str] = {}
        self._children: dict[tuple[type, str, int, str], tuple[list[int], list[float], list[int]]] = {}
        self._refreshers: list[Refresh] = []

    # ---------------------------------------------------------------- set-up

    def name_routes(self, routes: list[tuple]) -> None:
        """Learn each handler class's route template (the first route that names it)."""
        for route in routes:
            self._routes.setdefault(route[1], route_template(route[0]))

    def add_refresh(self, refresh: Refresh) -> None:
        self._refreshers.append(refresh)

    # ---------------------------------------------------------------- recording

    def record_request(self, handler: Any, status: int, seconds: float) -> None:
        if not self.enabled:
            return
        method = handler.request.method
        path = getattr(handler, "serving_path", HANDLER_PATH)
        cls = type(handler)
        key = (cls, method, status, path)
        children = self._children.get(key)
        if children is None:
            route_class = getattr(cls, "route_class", None)   # a BaseHandler's streaming twin: its route's
            route = self._routes.get(route_class() if route_class is not None else cls, UNMATCHED)
            label = method if method in _METHODS else "OTHER"
            children = (self.request_stats.counter(route, label, str(status)), self.request_stats.histogram(route),
                        self.serving_paths.setdefault((route, path), [0]))
            if len(self._children) < 10_000:
                self._children[key] = children
        children[0][0] += 1
        histogram = children[1]
        histogram[bisect_left(_LATENCY_BUCKETS, seconds)] += 1   # bucket i: seconds <= bound i
        histogram[-1] += seconds
        children[2][0] += 1

    def record_rate_limited(self, limit: str) -> None:
        if self.enabled:
            self.rate_limited.labels(limit).inc()

    def record_outbound(self, call: str, outcome: str, seconds: float) -> None:
        if self.enabled:
            self.pds_requests.labels(call, outcome).inc()
            self.pds_latency.labels(call).observe(seconds)

    # ---------------------------------------------------------------- exposition

    async def render(self) -> bytes:
        path = self.app.config.database_path
        for suffix, name in (("", "database"), ("-wal", "wal")):
            try:
                self.db_bytes.labels(name).set(os.path.getsize(f"{path}{suffix}"))
            except OSError:
                self.db_bytes.labels(name).set(0)
        # Counted by the server (daemon/http/server.py, `app.connections`); added here.
        limits = self.app.connections
        for name, counter, now in (("refused", self.connections_refused, limits.refused),
                                   ("accept_failures", self.accept_failures, limits.accept_failures)):
            if now > self._seen[name]:
                counter.inc(now - self._seen[name])
                self._seen[name] = now
        for refresh in self._refreshers:
            await refresh()
        return generate_latest(self.registry)


class _RequestStats:
    """``commonroom_http_requests_total{route, method, status}`` (with its ``_created``) and
    ``commonroom_http_request_duration_seconds{route}`` (buckets `_LATENCY_BUCKETS`, ``_count``,
    ``_sum``, ``_created``), exactly as prometheus_client's Counter and Histogram wrote them,
    from plain numbers kept on the event loop's thread (the only one that records)."""

    def __init__(self) -> None:
        #: (route, method, status) -> [count, created]
        self.counts: dict[tuple[str, str, str], list[Any]] = {}
        #: route -> [n per bucket ... n above the last, sum of seconds], and when it began
        self.latencies: dict[str, list[float]] = {}
        self.created: dict[str, float] = {}

    def counter(self, route: str, method: str, status: str) -> list[Any]:
        return self.counts.setdefault((route, method, status), [0, time.time()])

    def histogram(self, route: str) -> list[float]:
        cells = self.latencies.get(route)
        if cells is None:
            cells = self.latencies[route] = [0] * (len(_LATENCY_BUCKETS) + 1) + [0.0]
            self.created[route] = time.time()
        return cells

    def collect(self) -> Any:
        doc = "HTTP requests answered."
        total = CounterMetricFamily("commonroom_http_requests", doc, labels=["route", "method", "status"])
        created = GaugeMetricFamily("commonroom_http_requests_created", doc, labels=["route", "method", "status"])
        for (route, method, status), (count, since) in list(self.counts.items()):
            total.add_metric([route, method, status], count)
            created.add_metric([route, method, status], since)
        yield total
        yield created
        doc = "Time from the request's arrival to its answer."
        latency = HistogramMetricFamily("commonroom_http_request_duration_seconds", doc, labels=["route"])
        created = GaugeMetricFamily("commonroom_http_request_duration_seconds_created", doc, labels=["route"])
        for route, cells in list(self.latencies.items()):
            buckets, running = [], 0
            for bound, n in zip((*_LATENCY_BUCKETS, float("inf")), cells):
                running += n
                buckets.append((floatToGoString(bound), running))
            latency.add_metric([route], buckets, cells[-1])
            created.add_metric([route], self.created[route])
        yield latency
        yield created


class _ServingPaths:
    """``commonroom_http_serving_path_total{route, path}``: requests answered, by the code
    path that served them (daemon/http/lean.py: ``lean``, ``lean_task``; ``handler``)."""

    def __init__(self, counts: dict[tuple[str, str], list[int]]) -> None:
        self.counts = counts

    def collect(self) -> Any:
        family = CounterMetricFamily(
            "commonroom_http_serving_path",
            "Requests answered, by route and by the code path that served them: lean (a lean route "
            "answered at once), lean_task (a lean route that had to wait and went on in a task), "
            "handler (a RequestHandler).", labels=["route", "path"])
        for (route, path), count in list(self.counts.items()):
            family.add_metric([route, path], count[0])
        yield family


def outbound_call_label(label: str, what: str) -> str:
    """A bounded label for an outbound call: the XRPC method when there is one."""
    return label if re.fullmatch(r"[a-zA-Z][a-zA-Z0-9-]*(\.[a-zA-Z0-9-]+){2,}", label) else what


class MetricsHandler(BaseHandler):
    """``GET /metrics``: closed unless `metrics.allow_from` holds the client's address or
    the request carries `metrics.bearer_token` (``Authorization: Bearer <token>``)."""

    @operation("Prometheus metrics (for allowed addresses or with the bearer token)",
               responses={200: Response("Metrics in the Prometheus text format",
                                        {"text/plain": {"type": "string"}})},
               params=[header("Authorization", description="Bearer <metrics.bearer_token>")],
               errors={404: "Metrics are disabled, or the caller is not allowed"})
    async def get(self) -> None:
        cfg = self.app.config.metrics
        if not cfg.enabled or not self._allowed(cfg):
            raise ApiError(404, "not_found", "No route for GET /metrics.")
        body = await self.app.metrics.render()
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(body)

    def _allowed(self, cfg: Any) -> bool:
        sent = self.request.headers.get("Authorization", "")
        if cfg.bearer_token and sent.startswith("Bearer ") and \
                hmac.compare_digest(sent[7:].encode(), cfg.bearer_token.encode()):
            return True
        try:
            address = ipaddress.ip_address(self.client_ip())
        except ValueError:
            return False
        return any(address in ipaddress.ip_network(n, strict=False) for n in cfg.allow_from)
