"""The request layer: the base handler and errors (`base`), lean routes, routing, the
OpenAPI document, input validation and request metrics. Imports nothing above it
(`daemon.security`, `daemon.runtime`) except for type checking."""
