"""The site's way to write a moment, now the core's (`daemon.runtime.dates`, public as
``daemon.plugin.when`` and ``daemon.plugin.moment``), so plugins' pages write dates as the
site's own pages do."""

from daemon.plugin import moment, when  # noqa: F401 (re-exported for the web plugin's modules)
