"""Our lexicons load, are well formed, and the validator catches what they forbid. No network."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.atproto.lexicons import LEXICON_DIR, LexiconError, Lexicons, grapheme_count

NS = "community.commonroom"
DID = "did:plc:z72i7hdynmk6r22z27h6tvur"
TID = "3n2ud47okjeg6"
NOW = "2026-11-22T00:05:10.123Z"
BLOB = {"$type": "blob", "ref": {"$link": "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"},
        "mimeType": "image/png", "size": 1234}


@pytest.fixture(scope="module")
def lex() -> Lexicons:
    return Lexicons.load()


def good_records() -> dict[str, tuple[str, dict[str, Any]]]:
    """One full example of every record the service writes (nsid -> (rkey, value))."""
    return {
        f"{NS}.profile": ("self", {
            "$type": f"{NS}.profile", "displayName": "Garden club 🌱", "description": "We grow things.",
            "avatar": BLOB, "banner": {**BLOB, "mimeType": "image/jpeg"}, "type": "admin-approved",
            "guidelines": "Be kind.", "links": [{"uri": "https://example.com", "label": "Home"}],
            "createdAt": NOW, "updatedAt": NOW}),
        f"{NS}.admins": ("self", {
            "$type": f"{NS}.admins", "admins": [{"did": DID, "addedAt": NOW},
                                                {"did": "did:web:example.com", "addedAt": NOW}],
            "updatedAt": NOW}),
        f"{NS}.membership": (TID, {"$type": f"{NS}.membership", "community": DID, "joinedAt": NOW}),
        f"{NS}.membershipProof": (TID, {
            "$type": f"{NS}.membershipProof", "memberDid": DID,
            "membershipUri": f"at://{DID}/{NS}.membership/{TID}",
            "cid": "bafyreicwyensz5zndtinap5mzr3paguvu67lu3nrjgswejab35jqu4lupe", "confirmedAt": NOW}),
    }


def test_every_lexicon_file_is_named_after_its_id_and_its_refs_resolve(lex: Lexicons) -> None:
    files = sorted(LEXICON_DIR.glob("*.json"))
    # The records and the permission set; the method ids of user proofs have theirs too
    # (tests/test_identity_proofs.py checks those against the routes).
    records = {f"{NS}.{n}" for n in ("profile", "admins", "membership", "membershipProof", "authBasic")}
    assert records <= {p.stem for p in files}
    for path in files:
        doc = json.loads(path.read_text())
        assert doc["id"] == path.stem and doc["lexicon"] == 1

        def refs(node: Any) -> list[str]:
            if isinstance(node, dict):
                own = [node["ref"]] if node.get("type") == "ref" else []
                return own + [r for v in node.values() for r in refs(v)]
            if isinstance(node, list):
                return [r for v in node for r in refs(v)]
            return []
        for ref in refs(doc):
            nsid, _, name = ref.partition("#")
            target = lex.docs[nsid or doc["id"]]["defs"]
            assert (name or "main") in target, f"{path.name}: dangling ref {ref}"


def test_record_keys_match_the_spec(lex: Lexicons) -> None:
    assert lex.record_key(f"{NS}.profile") == "literal:self"
    assert lex.record_key(f"{NS}.admins") == "literal:self"
    assert lex.record_key(f"{NS}.membership") == "tid"
    assert lex.record_key(f"{NS}.membershipProof") == "tid"


def test_the_permission_set_grants_membership_writes_only(lex: Lexicons) -> None:
    main = lex.main(f"{NS}.authBasic")
    assert main["type"] == "permission-set"
    assert main["permissions"] == [{"type": "permission", "resource": "repo",
                                    "action": ["create", "update", "delete"],
                                    "collection": [f"{NS}.membership"]}]


@pytest.mark.parametrize("nsid", sorted(good_records()))
def test_the_records_the_service_writes_are_valid(lex: Lexicons, nsid: str) -> None:
    rkey, value = good_records()[nsid]
    lex.validate_record(nsid, value, rkey=rkey)
    required = lex.main(nsid)["record"]["required"]
    minimal = {k: v for k, v in value.items() if k in required}
    lex.validate_record(nsid, minimal, rkey=rkey)  # optional fields really are optional


BAD = [  # (nsid, change, path expected in the error)
    ("profile", {"displayName": "x" * 65}, "displayName"),                  # maxGraphemes
    ("profile", {"displayName": "é" * 321}, "displayName"),                 # maxLength in bytes
    ("profile", {"displayName": ""}, "displayName"),                        # minLength
    ("profile", {"type": "secret"}, "type"),                                # knownValues (strict)
    ("profile", {"createdAt": "2026-11-22"}, "createdAt"),                  # format datetime
    ("profile", {"avatar": {**BLOB, "mimeType": "image/gif"}}, "avatar.mimeType"),  # accept
    ("profile", {"avatar": {**BLOB, "size": 1_000_001}}, "avatar.size"),    # maxSize
    ("profile", {"avatar": {"cid": "bafkreiabc", "mimeType": "image/png"}}, "avatar"),  # legacy blob
    ("profile", {"links": [{"label": "no uri"}]}, "links[0].uri"),          # ref -> #link required
    ("profile", {"links": [{"uri": "x"}] * 11}, "links"),                   # array maxLength
    ("profile", {"colour": "red"}, "colour"),                               # undeclared (strict)
    ("profile", {"displayName": None}, "displayName"),                      # null is not absent
    ("admins", {"admins": []}, "admins"),                                   # array minLength
    ("admins", {"admins": [{"did": "alice.test", "addedAt": NOW}]}, "admins[0].did"),  # format did
    ("admins", {"admins": [{"did": DID}]}, "admins[0].addedAt"),            # required in #admin
    ("admins", {"admins": {"did": DID, "addedAt": NOW}}, "admins"),         # array type
    ("membership", {"community": "at://not-a-did"}, "community"),
    ("membershipProof", {"membershipUri": "https://example.com"}, "membershipUri"),  # at-uri
    ("membershipProof", {"cid": "not a cid!"}, "cid"),                      # format cid
    ("membershipProof", {"$type": f"{NS}.membership"}, "$type"),
]


@pytest.mark.parametrize("name,change,path", BAD, ids=[f"{n}-{p}" for n, _, p in BAD])
def test_the_validator_rejects(lex: Lexicons, name: str, change: dict[str, Any], path: str) -> None:
    nsid = f"{NS}.{name}"
    rkey, value = good_records()[nsid]
    with pytest.raises(LexiconError) as err:
        lex.validate_record(nsid, {**value, **change}, rkey=rkey)
    assert path in [p for p, _ in err.value.problems], err.value.problems


def test_required_fields_and_record_keys_are_checked(lex: Lexicons) -> None:
    with pytest.raises(LexiconError) as err:
        lex.validate_record(f"{NS}.membership", {"community": DID}, rkey="self")
    assert {p for p, _ in err.value.problems} == {"joinedAt", "rkey"}
    with pytest.raises(LexiconError):
        lex.validate_record(f"{NS}.profile", good_records()[f"{NS}.profile"][1], rkey=TID)


def test_reading_is_lenient_where_writing_is_strict(lex: Lexicons) -> None:
    rkey, value = good_records()[f"{NS}.profile"]
    newer = {**value, "type": "invite-only", "pronouns": "they"}
    lex.validate_record(f"{NS}.profile", newer, rkey=rkey, strict=False)
    with pytest.raises(LexiconError):
        lex.validate_record(f"{NS}.profile", newer, rkey=rkey)


def test_integer_boolean_and_enum_checks() -> None:
    lex = Lexicons({"com.example.thing": {"lexicon": 1, "id": "com.example.thing", "defs": {"main": {
        "type": "record", "key": "any", "record": {"type": "object", "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 3},
            "flag": {"type": "boolean"},
            "colour": {"type": "string", "enum": ["red", "blue"]}}}}}}})
    lex.validate_record("com.example.thing", {"n": 2, "flag": True, "colour": "red"})
    for bad in [{"n": 0}, {"n": 4}, {"n": True}, {"n": "2"}, {"flag": 1}, {"colour": "green"}]:
        with pytest.raises(LexiconError):
            lex.validate_record("com.example.thing", bad, strict=False)


def test_another_namespace_gets_the_same_schemas(tmp_path: Path) -> None:
    lex = Lexicons.load(LEXICON_DIR, "org.example.groups")
    assert "org.example.groups.membership" in lex and f"{NS}.membership" not in lex
    assert lex.main("org.example.groups.authBasic")["permissions"][0]["collection"] == \
        ["org.example.groups.membership"]
    lex.validate_record("org.example.groups.membership",
                        {"$type": "org.example.groups.membership", "community": DID, "joinedAt": NOW})


def test_grapheme_counting_treats_emoji_sequences_and_accents_as_one() -> None:
    assert grapheme_count("abc") == 3
    assert grapheme_count("e\u0301") == 1
    assert grapheme_count("👨‍👩‍👧‍👦") == 1
    assert grapheme_count("🇫🇷🇩🇪") == 2
    assert grapheme_count("👍🏽x") == 2
