"""Plugin package (see the issue tracker for its status)."""
