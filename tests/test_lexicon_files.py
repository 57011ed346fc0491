"""`commonroom lexicons --check | --write`: a plugin's method lexicons are made from its
routes' declarations, as the built-ins' are. The examples' and the built-ins' agree with
their routes; a throwaway plugin whose lexicon says another thing than its route fails the
check, which names the field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daemon.plugin import (DATETIME, DID, STRING, BaseHandler, UserMethod, hookimpl, obj, operation,
                           prove_acting_user)
from daemon.runtime.lexicon_files import problems, wanted

REPO = Path(__file__).resolve().parent.parent
METHOD = "com.example.polls.open"


class OpenPoll(BaseHandler):
    auth = "app"
    user_methods = {"POST": UserMethod(METHOD, "creatorDid", "Open a poll")}

    @operation("Open a poll", body=obj({"creatorDid": DID, "question": STRING, "closesAt": DATETIME},
                                       ["creatorDid", "question"]),
               responses={201: obj({"pollId": STRING}, ["pollId"])})
    async def post(self) -> None:  # pragma: no cover  (only declared here)
        await prove_acting_user(self, self.json_body().get("creatorDid"), required=True)
        self.send_json({"pollId": "p1"}, 201)


@pytest.fixture
def lexicon_folder(tmp_path: Path) -> Path:
    """The plugin's lexicons: a bare procedure, as someone starting out writes it."""
    folder = tmp_path / "lexicons"
    folder.mkdir()
    (folder / f"{METHOD}.json").write_text(json.dumps(
        {"lexicon": 1, "id": METHOD, "defs": {"main": {"type": "procedure"}}}))
    return folder


@pytest.fixture
def extra_plugins(lexicon_folder: Path) -> tuple:
    class Polls:
        @hookimpl
        def cr_routes(self, app: Any) -> list[tuple]:
            return [(r"/api/v1/polls", OpenPoll)]

        @hookimpl
        def cr_lexicons(self) -> str:
            return str(lexicon_folder)

    return (Polls(),)


async def test_the_built_ins_and_the_examples_agree_with_their_routes(app):
    files = [f for f in wanted(app) if f.method_id != METHOD]   # the throwaway one is below
    assert {"noticeboard", "reports"} <= {f.plugin for f in files}
    assert list(problems(files)) == []


async def test_a_lexicon_that_disagrees_with_its_route_is_named_by_its_field(app, lexicon_folder):
    [made] = [f for f in wanted(app) if f.method_id == METHOD]
    [problem] = problems([made])
    assert problem.startswith(f"{made.plugin}: {METHOD}.json: defs.main.description: the route declares")
    made.path.write_text(made.text)                      # what --write does
    assert list(problems([made])) == []

    doc = json.loads(made.path.read_text())
    del doc["defs"]["main"]["input"]["schema"]["properties"]["closesAt"]
    made.path.write_text(json.dumps(doc))
    [problem] = problems([made])
    assert problem == (f"{made.plugin}: {METHOD}.json: defs.main.input.schema.properties.closesAt: the route declares "
                       '{"type": "string", "description": "ISO 8601 time (UTC)"}, '
                       "the lexicon has nothing")
    assert "output" in made.document["defs"]["main"]     # the answer is part of the lexicon


def test_the_command_checks_the_examples_without_touching_the_database(tmp_path: Path):
    config = tmp_path / "config.yaml"
    state = tmp_path / "state"
    config.write_text(f"secret_key: '{'00' * 31}01'\nstorage: {{state_dir: {state}}}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / ".test-plugins")}
    done = subprocess.run([str(Path(sys.executable).parent / "commonroom"), "-c", str(config), "lexicons", "--check"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "method lexicons agree with their routes" in done.stdout
    assert not state.exists()
