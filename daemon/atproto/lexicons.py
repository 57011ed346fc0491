"""Our lexicons (``lexicons/*.json``) and a validator for the records the service writes.

The files use the namespace ``community.commonroom``; an operator who configures another
``atproto.namespace`` gets the same schemas with the prefix replaced. The validator covers
the lexicon features those schemas use, and a little more: ``record`` (with its ``key``),
``object`` (``required``, ``nullable``), ``string`` (``minLength``/``maxLength`` in UTF-8 bytes,
``minGraphemes``/``maxGraphemes``, ``format``, ``enum``, ``const``, ``knownValues``),
``integer`` (``minimum``, ``maximum``, ``enum``, ``const``), ``boolean``, ``array``, ``ref``
(``#def``, ``nsid``, ``nsid#def``), ``union``, ``blob`` (``accept`` with wildcards,
``maxSize``), ``unknown``, ``cid-link``, ``bytes``.

*Strict* validation (the default, for records we write ourselves) also rejects properties a
schema does not declare and string values outside ``knownValues``: a writer should only ever
produce what its own schema describes, while readers stay open to newer values.
"""

from __future__ import annotations

import fnmatch
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import regex

from daemon.atproto import syntax

if TYPE_CHECKING:  # pragma: no cover
    from daemon.runtime.app import Application

log = logging.getLogger("commonroom.atproto")

def _lexicon_dir() -> Path:
    """`lexicons/` of the checkout, or where a non-editable install puts it
    (``<prefix>/share/commonroom/lexicons``, setup.cfg's data_files)."""
    import sys
    checkout = Path(__file__).resolve().parent.parent.parent / "lexicons"
    installed = Path(sys.prefix) / "share" / "commonroom" / "lexicons"
    return checkout if checkout.is_dir() or not installed.is_dir() else installed


LEXICON_DIR = _lexicon_dir()
SOURCE_NAMESPACE = "community.commonroom"

_FORMATS: dict[str, Callable[[Any], bool]] = {
    "did": syntax.is_did,
    "handle": syntax.is_handle,
    "at-identifier": syntax.is_at_identifier,
    "nsid": syntax.is_nsid,
    "record-key": syntax.is_rkey,
    "tid": syntax.is_tid,
    "at-uri": syntax.is_at_uri,
    "uri": syntax.is_uri,
    "datetime": syntax.is_datetime,
    "cid": syntax.is_cid,
    "language": syntax.is_language,
}


class LexiconError(ValueError):
    """A value does not match its lexicon. ``problems`` lists ``(path, message)``."""

    def __init__(self, nsid: str, problems: list[tuple[str, str]]) -> None:
        self.nsid = nsid
        self.problems = problems
        text = "; ".join(f"{p}: {m}" if p else m for p, m in problems)
        super().__init__(f"{nsid}: {text}")


# Extended grapheme clusters (UAX #29) as the `regex` package's ``\X`` finds them: the stdlib
# has no segmentation, and a hand-written approximation got ZWJ between letters wrong.
_GRAPHEME = regex.compile(r"\X")


def grapheme_count(text: str) -> int:
    """User-perceived characters: extended grapheme clusters (UAX #29), the unit of a
    lexicon's ``maxGraphemes``."""
    return sum(1 for _ in _GRAPHEME.finditer(text))


@dataclass
class _Ctx:
    nsid: str       # the document a relative "#ref" is resolved in
    strict: bool
    problems: list[tuple[str, str]]

    def fail(self, path: str, message: str) -> None:
        self.problems.append((path, message))


class Lexicons:
    """A set of lexicon documents, by NSID."""

    def __init__(self, docs: dict[str, dict[str, Any]]) -> None:
        self.docs = docs

    @classmethod
    def load(cls, directory: str | Path = LEXICON_DIR,
             namespace: str = SOURCE_NAMESPACE) -> Lexicons:
        """Read every ``*.json`` in `directory`, renamed into `namespace`."""
        docs: dict[str, dict[str, Any]] = {}
        for path in sorted(Path(directory).glob("*.json")):
            text = path.read_text()
            if namespace != SOURCE_NAMESPACE:
                text = text.replace(f"{SOURCE_NAMESPACE}.", f"{namespace}.")
            doc = json.loads(text)
            if doc.get("lexicon") != 1 or not syntax.is_nsid(doc.get("id")) \
                    or not isinstance(doc.get("defs"), dict):
                raise ValueError(f"{path} is not a lexicon document (lexicon: 1, id, defs)")
            docs[doc["id"]] = doc
        return cls(docs)

    def __contains__(self, nsid: str) -> bool:
        return nsid in self.docs

    def main(self, nsid: str) -> dict[str, Any]:
        return self.docs[nsid]["defs"]["main"]

    def is_record(self, nsid: str) -> bool:
        return nsid in self.docs and self.main(nsid).get("type") == "record"

    def record_key(self, nsid: str) -> str:
        """The record key type: ``tid``, ``literal:self``, ``any``, ``nsid``..."""
        return self.main(nsid).get("key", "any")

    # ---------------------------------------------------------------- validation

    def validate_record(self, nsid: str, value: Any, *, rkey: str | None = None,
                        strict: bool = True) -> None:
        """Raise :class:`LexiconError` unless `value` is a valid `nsid` record (stored under
        `rkey`, when given)."""
        if not self.is_record(nsid):
            raise LexiconError(nsid, [("", "no record lexicon with this NSID")])
        main = self.main(nsid)
        ctx = _Ctx(nsid, strict, [])
        if not isinstance(value, dict):
            ctx.fail("", "a record must be an object")
        else:
            if "$type" in value and value["$type"] != nsid:
                ctx.fail("$type", f"is {value['$type']!r}, expected {nsid!r}")
            self._object(main["record"], value, "", ctx)
        if rkey is not None:
            self._key(main.get("key", "any"), rkey, ctx)
        if ctx.problems:
            raise LexiconError(nsid, ctx.problems)

    def validate_if_known(self, nsid: str, value: Any, *, rkey: str | None = None) -> None:
        """Validate (strictly) when we have a record lexicon for `nsid`; else do nothing."""
        if self.is_record(nsid):
            self.validate_record(nsid, value, rkey=rkey, strict=True)

    # ---------------------------------------------------------------- methods (XRPC)

    def method(self, nsid: str) -> dict[str, Any] | None:
        """The main definition of a method lexicon (a query or procedure), or None."""
        doc = self.docs.get(nsid)
        main = doc["defs"].get("main") if doc else None
        return main if isinstance(main, dict) and main.get("type") in ("query", "procedure") else None

    def declared(self, nsid: str, part: str) -> set[str]:
        """The property names a method's ``parameters`` or ``input`` schema declares."""
        main = self.method(nsid) or {}
        schema = main.get(part) or {}
        if part != "parameters":
            schema = schema.get("schema") or {}
        return set(schema.get("properties") or {})

    def parse_params(self, nsid: str, raw: dict[str, list[str]]) -> dict[str, Any]:
        """A method's query parameters (`raw`: each name's values, as the query string had
        them) typed by its ``parameters`` (``params``: boolean, integer, string, arrays of
        them); raises :class:`LexiconError` naming each parameter that breaks the lexicon,
        is unknown, missing or given twice where one is expected."""
        main = self.method(nsid) or {}
        schema = main.get("parameters") or {"type": "params", "properties": {}}
        props = schema.get("properties", {})
        ctx = _Ctx(nsid, True, [])
        out: dict[str, Any] = {}
        for name, values in raw.items():
            item = props.get(name)
            if item is None:
                ctx.fail(name, "is not a parameter of this method")
                continue
            if item.get("type") == "array":
                out[name] = [self._param_value(item["items"], v, name, ctx) for v in values]
                if "maxLength" in item and len(values) > item["maxLength"]:
                    ctx.fail(name, f"has {len(values)} values, at most {item['maxLength']} allowed")
            elif len(values) != 1:
                ctx.fail(name, "is given more than once")
            else:
                out[name] = self._param_value(item, values[0], name, ctx)
        for name in schema.get("required", []):
            if name not in raw:
                ctx.fail(name, "is required")
        if ctx.problems:
            raise LexiconError(nsid, ctx.problems)
        return out

    def _param_value(self, schema: dict[str, Any], text: str, path: str, ctx: _Ctx) -> Any:
        kind = schema.get("type")
        value: Any = text
        if kind == "integer":
            if not re_integer(text):
                ctx.fail(path, "must be an integer")
                return None
            value = int(text)
        elif kind == "boolean":
            if text not in ("true", "false"):
                ctx.fail(path, "must be true or false")
                return None
            value = text == "true"
        self._value(schema, value, path, ctx)
        return value

    def validate_input(self, nsid: str, body: Any) -> None:
        """Raise :class:`LexiconError` unless `body` is valid input of the procedure `nsid`:
        a top-level property the lexicon does not declare is refused (a misspelt field would
        otherwise be ignored); inside the declared ones, objects may hold more (a record's
        value), as JSON schemas allow."""
        self._method_body(nsid, "input", body, strict=False)
        main = self.method(nsid) or {}
        schema = (main.get("input") or {}).get("schema") or {}
        if isinstance(body, dict) and schema.get("type") == "object":
            extra = [(name, "is not in the lexicon") for name in body if name not in schema.get("properties", {})]
            if extra:
                raise LexiconError(nsid, extra)

    def validate_output(self, nsid: str, body: Any) -> None:
        """Raise :class:`LexiconError` unless `body` is valid output of the method `nsid`
        (lenient, as readers are: properties added later are allowed; a lexicon that
        declares no output schema allows any)."""
        self._method_body(nsid, "output", body, strict=False)

    def _method_body(self, nsid: str, part: str, body: Any, *, strict: bool) -> None:
        main = self.method(nsid)
        if main is None:
            raise LexiconError(nsid, [("", "no query or procedure lexicon with this NSID")])
        declared = main.get(part)
        ctx = _Ctx(nsid, strict, [])
        if declared is None or "schema" not in declared:
            if part == "input" and body not in (None, {}):
                ctx.fail("", f"this method takes no {part}")
        else:
            self._value(declared["schema"], body, "", ctx)
        if ctx.problems:
            raise LexiconError(nsid, ctx.problems)

    def _key(self, key: str, rkey: str, ctx: _Ctx) -> None:
        if not syntax.is_rkey(rkey):
            ctx.fail("rkey", f"{rkey!r} is not a record key")
        elif key == "tid" and not syntax.is_tid(rkey):
            ctx.fail("rkey", f"{rkey!r} is not a TID")
        elif key == "nsid" and not syntax.is_nsid(rkey):
            ctx.fail("rkey", f"{rkey!r} is not an NSID")
        elif key.startswith("literal:") and rkey != key[len("literal:"):]:
            ctx.fail("rkey", f"must be {key[len('literal:'):]!r}")

    def _resolve(self, ref: str, ctx: _Ctx) -> tuple[str, dict[str, Any]] | None:
        nsid, _, name = ref.partition("#")
        nsid = nsid or ctx.nsid
        doc = self.docs.get(nsid)
        schema = doc["defs"].get(name or "main") if doc else None
        return (nsid, schema) if schema is not None else None

    def _value(self, schema: dict[str, Any], value: Any, path: str, ctx: _Ctx) -> None:
        kind = schema.get("type")
        handler = {
            "object": self._object, "ref": self._ref, "union": self._union,
            "string": self._string, "integer": self._integer, "boolean": self._boolean,
            "array": self._array, "blob": self._blob, "unknown": self._unknown,
            "cid-link": self._cid_link, "bytes": self._bytes,
        }.get(kind)  # type: ignore[arg-type]
        if handler is None:
            ctx.fail(path, f"the lexicon uses the type {kind!r}, which this validator does not know")
            return
        handler(schema, value, path, ctx)

    def _object(self, schema: dict[str, Any], value: Any, path: str, ctx: _Ctx) -> None:
        if not isinstance(value, dict):
            ctx.fail(path, "must be an object")
            return
        props = schema.get("properties", {})
        nullable = set(schema.get("nullable", []))
        for name in schema.get("required", []):
            if name not in value or (value[name] is None and name not in nullable):
                ctx.fail(_join(path, name), "is required")
        for name, item in value.items():
            if name == "$type" and path == "":
                continue
            if name not in props:
                if ctx.strict and name != "$type":
                    ctx.fail(_join(path, name), "is not in the lexicon")
                continue
            if item is None:
                if name not in nullable:
                    ctx.fail(_join(path, name), "must not be null")
                continue
            self._value(props[name], item, _join(path, name), ctx)

    def _ref(self, schema: dict[str, Any], value: Any, path: str, ctx: _Ctx) -> None:
        found = self._resolve(schema["ref"], ctx)
        if found is None:
            ctx.fail(path, f"the lexicon refers to {schema['ref']!r}, which does not exist")
            return
        nsid, target = found
        inner = _Ctx(nsid, ctx.strict, ctx.problems)
        self._value(target, value, path, inner)

    def _union(self, schema: dict[str, Any], value: Any, path: str, ctx: _Ctx) -> None:
        if not isinstance(value, dict) or not isinstance(value.get("$type"), str):
            ctx.fail(path, "must be an object with a $type")
            return
        refs = schema.get("refs", [])
        wanted = value["$type"]
        for ref in refs:
            full = ref if not ref.startswith("#") else f"{ctx.nsid}{ref}"
            if full == wanted or (full.endswith("#main") and full[:-5] == wanted):
                self._ref({"ref": ref}, value, path, ctx)
                return
        if schema.get("closed") or ctx.strict:
            ctx.fail(path, f"$type {wanted!r} is not one of {', '.join(refs)}")

    def _string(self, schema: dict[str, Any], value: Any, path: str, ctx: _Ctx) -> None:
        if not isinstance(value, str):
            ctx.fail(path, "must be a string")
            return
        size = len(value.encode("utf-8"))
        if "maxLength" in schema and size > schema["maxLength"]:
            ctx.fail(path, f"is {size} bytes long, at most {schema['maxLength']} allowed")
        if "minLength" in schema and size < schema["minLength"]:
            ctx.fail(path, f"must be at least {schema['minLength']} bytes long")
        if "maxGraphemes" in schema or "minGraphemes" in schema:
            graphemes = grapheme_count(value)
            if "maxGraphemes" in schema and graphemes > schema["maxGraphemes"]:
                ctx.fail(path, f"is {graphemes} characters long, at most {schema['maxGraphemes']} allowed")
            if "minGraphemes" in schema and graphemes < schema["minGraphemes"]:
                ctx.fail(path, f"must be at least {schema['minGraphemes']} characters long")
        fmt = schema.get("format")
        if fmt is not None:
            check = _FORMATS.get(fmt)
            if check is None:
                ctx.fail(path, f"the lexicon uses the string format {fmt!r}, which this validator does not know")
            elif not check(value):
                ctx.fail(path, f"{value!r} is not a valid {fmt}")
        if "const" in schema and value != schema["const"]:
            ctx.fail(path, f"must be {schema['const']!r}")
        if "enum" in schema and value not in schema["enum"]:
            ctx.fail(path, f"must be one of {', '.join(map(repr, schema['enum']))}")
        if ctx.strict and "knownValues" in schema and value not in schema["knownValues"]:
            ctx.fail(path, f"{value!r} is not one of {', '.join(map(repr, schema['knownValues']))}")

    def _integer(self, schema: dict[str, Any], value: Any, path: str, ctx: _Ctx) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            ctx.fail(path, "must be an integer")
            return
        if "minimum" in schema and value < schema["minimum"]:
            ctx.fail(path, f"must be at least {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            ctx.fail(path, f"must be at most {schema['maximum']}")
        if "enum" in schema and value not in schema["enum"]:
            ctx.fail(path, f"must be one of {schema['enum']}")
        if "const" in schema and value != schema["const"]:
            ctx.fail(path, f"must be {schema['const']}")

    def _boolean(self, schema: dict[str, Any], value: Any, path: str, ctx: _Ctx) -> None:
        if not isinstance(value, bool):
            ctx.fail(path, "must be true or false")
        elif "const" in schema and value != schema["const"]:
            ctx.fail(path, f"must be {str(schema['const']).lower()}")

    def _array(self, schema: dict[str, Any], value: Any, path: str, ctx: _Ctx) -> None:
        if not isinstance(value, list):
            ctx.fail(path, "must be a list")
            return
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            ctx.fail(path, f"has {len(value)} items, at most {schema['maxLength']} allowed")
        if "minLength" in schema and len(value) < schema["minLength"]:
            ctx.fail(path, f"must have at least {schema['minLength']} item(s)")
        for i, item in enumerate(value):
            self._value(schema["items"], item, f"{path}[{i}]", ctx)

    def _blob(self, schema: dict[str, Any], value: Any, path: str, ctx: _Ctx) -> None:
        if not isinstance(value, dict):
            ctx.fail(path, "must be a blob reference")
            return
        ref = value.get("ref")
        if value.get("$type") == "blob":
            if not (isinstance(ref, dict) and syntax.is_cid(ref.get("$link"))):
                ctx.fail(_join(path, "ref"), "must be {$link: <cid>}")
            if isinstance(value.get("size"), bool) or not isinstance(value.get("size"), int):
                ctx.fail(_join(path, "size"), "must be an integer")
        elif not (ctx.strict is False and syntax.is_cid(value.get("cid"))):  # legacy shape, read-only
            ctx.fail(path, "must be a blob reference ({$type: blob, ref, mimeType, size})")
            return
        mime = value.get("mimeType")
        if not isinstance(mime, str) or "/" not in mime:
            ctx.fail(_join(path, "mimeType"), "must be a MIME type")
        elif "accept" in schema and not any(fnmatch.fnmatchcase(mime, pattern)
                                            for pattern in schema["accept"]):
            ctx.fail(_join(path, "mimeType"), f"{mime} is not accepted ({', '.join(schema['accept'])})")
        size = value.get("size")
        if "maxSize" in schema and isinstance(size, int) and size > schema["maxSize"]:
            ctx.fail(_join(path, "size"), f"is {size} bytes, at most {schema['maxSize']} allowed")

    def _unknown(self, schema: dict[str, Any], value: Any, path: str, ctx: _Ctx) -> None:
        if not isinstance(value, dict):
            ctx.fail(path, "must be an object")

    def _cid_link(self, schema: dict[str, Any], value: Any, path: str, ctx: _Ctx) -> None:
        if not (isinstance(value, dict) and syntax.is_cid(value.get("$link"))):
            ctx.fail(path, "must be {$link: <cid>}")

    def _bytes(self, schema: dict[str, Any], value: Any, path: str, ctx: _Ctx) -> None:
        if not (isinstance(value, dict) and isinstance(value.get("$bytes"), str)):
            ctx.fail(path, "must be {$bytes: <base64>}")


def re_integer(text: str) -> bool:
    """A query parameter's integer: ASCII digits, an optional minus, at most 18 digits."""
    return bool(_INTEGER.fullmatch(text))


_INTEGER = regex.compile(r"-?[0-9]{1,18}")


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# ------------------------------------------------------------------ per app


def lexicons_for(app: Application) -> Lexicons:
    """The lexicons in the app's namespace (``app.lexicons``, loaded once)."""
    return app.lexicons


def load_lexicons(namespace: str) -> Lexicons:
    """The shipped lexicons in `namespace`. Empty if ``lexicons/`` is missing (an install
    without the repository's data files): nothing is then validated."""
    if LEXICON_DIR.is_dir():
        return Lexicons.load(LEXICON_DIR, namespace)
    log.warning("no lexicons directory at %s: records are written unvalidated", LEXICON_DIR)
    return Lexicons({})


def nsid(app: Application, name: str) -> str:
    """The full NSID of one of our lexicons: ``nsid(app, "membership")`` ->
    ``community.commonroom.membership`` (or the configured namespace)."""
    return f"{app.config.atproto.namespace}.{name}"
