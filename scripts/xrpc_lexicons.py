#!/usr/bin/env python3
"""Write the lexicons of the XRPC methods (daemon/atproto/xrpc_lexicons.py) from the routes'
declarations: the service's into lexicons/, the reports plugin's into its own folder.

    .venv/bin/python scripts/xrpc_lexicons.py          # write
    .venv/bin/python scripts/xrpc_lexicons.py --check  # exit 1 if a file is stale

tests/test_xrpc.py runs the same comparison. A development tool: it builds the app with the
test helpers (commonroom_testing, installed by `scripts/setup --test`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def wanted(app: object) -> dict[Path, str]:
    """Each lexicon file the service's methods should have, with its text: a built-in
    plugin that ships lexicons (`cr_lexicons`, the reports plugin) gets its own, as
    `commonroom lexicons --write` writes any plugin's (daemon/runtime/lexicon_files.py);
    the other methods of the service's namespace go to lexicons/."""
    from daemon.atproto.xrpc import methods
    from daemon.atproto.xrpc_lexicons import method_lexicon
    from daemon.runtime.lexicon_files import wanted as plugin_files
    out: dict[Path, str] = {}
    shipped = {f.method_id for f in plugin_files(app)}
    for f in plugin_files(app):
        parents = f.path.resolve().parents
        if REPO in parents and REPO / ".test-plugins" not in parents:  # the built-ins' (examples: theirs)
            out[f.path] = f.text
    for mid, method in methods(app).items():
        if mid in shipped or not mid.startswith(app.config.atproto.namespace + "."):  # type: ignore[attr-defined]
            continue  # a plugin's own lexicon (above), or another authority's
        doc = method_lexicon(method, app.config.atproto.namespace)  # type: ignore[attr-defined]
        out[REPO / "lexicons" / f"{doc['id']}.json"] = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    return out


async def files_wanted() -> dict[Path, str]:
    from commonroom_testing.app import build_config
    from daemon.runtime.app import create_app
    with tempfile.TemporaryDirectory(prefix="xrpc-lexicons-") as state:
        config, pm = build_config(Path(state), {"plugins": {"disabled": []}})
        app = await create_app(config, pm, start=False)
        try:
            return wanted(app)
        finally:
            await app.shutdown()


def main() -> int:
    files = asyncio.run(files_wanted())
    stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    if "--check" in sys.argv:
        for p in stale:
            print(f"stale: {p.relative_to(REPO)}")
        return 1 if stale else 0
    for p in stale:
        p.write_text(files[p])
        print(f"wrote {p.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
