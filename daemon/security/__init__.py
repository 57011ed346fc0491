"""Guards: outbound targets, sealed secrets, log redaction, rate limits, browser sessions,
and who may see or act on a community. Imports only `daemon.http.base` below it (and the
runtime's clock), except for type checking."""
