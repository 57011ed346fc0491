"""`commonroom communities handover DID --out FILE` and `commonroom communities import FILE`:
an operator hands a community over to another Commonroom, or imports one (plugins/communities/
handover.py; docs/operations.md, "Handing communities over between Commonroom instances")."""

from __future__ import annotations

import argparse
import getpass
import json
import os
from typing import TYPE_CHECKING, Any

from daemon.plugin import ApiError
from daemon.plugin.cli import add_json_flag, fail
from plugins.communities import bundle, common, store

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

ACTIONS = ("handover", "import")


def add_actions(actions: Any) -> None:
    """The two actions, on the `communities` command's subparsers."""
    handing = actions.add_parser("handover", help="hand a community over to another Commonroom: writes the "
                                                  "sealed bundle and prints its passphrase once")
    handing.add_argument("did", help="the community's DID")
    handing.add_argument("--out", required=True, help="where to write the bundle (a new file)")
    handing.add_argument("--to", dest="to_url", help="the new instance's address, shown to visitors here "
                                                     "(optional)")
    importing = actions.add_parser("import", help="import a community handed over from another Commonroom")
    importing.add_argument("file", help="the handover bundle")
    importing.add_argument("--passphrase-file", help="a file holding the passphrase (else "
                                                     "$COMMONROOM_HANDOVER_PASSPHRASE, else asked)")
    add_json_flag(importing)


async def run(app: "Application", args: argparse.Namespace) -> int:
    if args.action == "handover":
        return await handover_command(app, args)
    return await import_command(app, args)


async def handover_command(app: "Application", args: argparse.Namespace) -> int:
    from plugins.communities import handover  # it imports reindex, which imports this module
    row = await store.get_community(app.db, args.did)
    if row is None or row["state"] != "active":
        return fail(f"communities handover: no community {args.did} here")
    try:
        to = common.destination(args.to_url)
    except ApiError:
        return fail("communities handover: --to must be the new instance's address (https://…)", 2)
    try:
        # O_EXCL: never overwrite a file (an earlier bundle, or anything else)
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        return fail(f"communities handover: cannot create {args.out}: {exc.strerror}")
    try:
        answer = await handover.export(app, row, None, to=to, operator=True)
    except ApiError as exc:
        os.close(fd)
        os.unlink(args.out)
        return fail(f"communities handover: {exc.message} Nothing changed.")
    with os.fdopen(fd, "wb") as out:
        out.write(answer["bundle"])
    print(f"handed over {row['handle']} ({args.did}); the bundle is in {args.out}")
    print(f"passphrase (shown only now; give it to the new instance apart from the bundle): "
          f"{answer['passphrase']}")
    print("this instance has forgotten the community; not carried:")
    for item in answer["notCarried"]:
        print(f"  - {item}")
    return 0

async def import_command(app: "Application", args: argparse.Namespace) -> int:
    from plugins.communities import handover
    try:
        with open(args.file, "rb") as f:
            data = f.read(bundle.MAX_BUNDLE_BYTES + 1)
    except OSError as exc:
        return fail(f"communities import: cannot read {args.file}: {exc.strerror}")
    if args.passphrase_file:
        try:
            with open(args.passphrase_file, encoding="utf-8") as f:
                passphrase = f.read().strip()
        except OSError as exc:
            return fail(f"communities import: cannot read {args.passphrase_file}: {exc.strerror}")
    elif os.environ.get("COMMONROOM_HANDOVER_PASSPHRASE"):
        passphrase = os.environ["COMMONROOM_HANDOVER_PASSPHRASE"]
    else:
        passphrase = getpass.getpass("The bundle's passphrase: ")
    try:
        answer = await handover.import_bundle(app, data, passphrase, importer_did=None)
    except handover.ImportRefused as exc:
        return fail(f"communities import: {exc} ({exc.code})")
    except ApiError as exc:
        return fail(f"communities import: {exc.message} Nothing was imported.")
    if args.json:
        print(json.dumps(answer))
        return 0
    print(f"imported {answer['handle']} ({answer['did']}) from {answer['from']}: {answer['members']} member(s), "
          f"admins {answer['admins']}, {answer['restored']['bans']} ban(s), "
          f"{answer['restored']['invites']} invite(s), {answer['restored']['auditEntries']} audit entries")
    for item in answer["notRestored"]:
        print(f"  not restored: {item}")
    return 0
