"""A test-only plugin for tests/test_communities_move_sigkill.py: the daemon process kills
itself with SIGKILL right after a community move records the step named by
COMMONROOM_KILL_AFTER_MOVE_STEP (as a power cut or the OOM killer would, between two steps)."""

from __future__ import annotations

import os
import signal

import daemon.atproto.moves as moves


def _kill_after(did: str, step: str) -> None:
    if step == os.environ.get("COMMONROOM_KILL_AFTER_MOVE_STEP"):
        os.kill(os.getpid(), signal.SIGKILL)


class MoveKiller:
    plugin_name = "move-killer"


moves.after_step = _kill_after
plugin = MoveKiller()
