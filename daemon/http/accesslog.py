"""The access log (`commonroom.access`): one line per request, but not for every read.

A line costs ~40 µs of CPU (a `logging.LogRecord`, the caller lookup, formatting, the
redaction filter, a write to stderr) and ~150 bytes: at 600 requests/s, 6.5 MB a minute,
and for `membership/check` (which apps call on every page view) more CPU than everything
else the service does for the request. So successful reads are sampled
(`access_log.successful_reads`, default one in a hundred) while errors (4xx, 5xx) and every
other request (the writes) always get a line. The metrics count every request
(docs/operations.md, "Metrics").

A read is a GET, HEAD or OPTIONS, or a request to a route whose class sets
``read_route = True`` (membership/check answers a POST but changes nothing).
"""

from __future__ import annotations

import logging
from typing import Any

_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class AccessLog:
    """The application's access log (one per Application: the sample counter is its own)."""

    def __init__(self, successful_reads: float, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger("commonroom.access")
        #: every how many successful reads one is written (0: none)
        self.every = round(1 / successful_reads) if successful_reads > 0 else 0
        self._reads = 0

    def write(self, handler: Any, status: int, seconds: float) -> None:
        request = handler.request
        if status < 400:
            if not self.logger.isEnabledFor(logging.INFO):
                return
            sample = ""
            if request.method in _READ_METHODS or getattr(handler, "read_route", False):
                if self.every != 1:
                    seen, self._reads = self._reads, self._reads + 1
                    if not self.every or seen % self.every:
                        return
                    sample = f" (1 in {self.every} successful reads logged)"
            self.logger.info("%d %s %s %.1fms%s", status, request.method, request.uri, 1000.0 * seconds, sample)
            return
        level = logging.WARNING if status < 500 else logging.ERROR
        if self.logger.isEnabledFor(level):
            self.logger.log(level, "%d %s %s %.1fms", status, request.method, request.uri, 1000.0 * seconds)
