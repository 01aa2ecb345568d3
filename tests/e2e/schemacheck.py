"""Validation of dask-caps JSON documents against schemas/*.schema.json
with Debian's python3-jsonschema (Draft202012Validator).

Every end-to-end test that runs dask-caps passes its result through
checked(): whatever JSON document the run printed is validated against the
schema its "schema" key names, so a change that breaks a schema fails the
tests that exercise it on real outputs.
"""

from __future__ import annotations

import json
import os

try:
    import jsonschema
except ImportError as e:  # pragma: no cover - install-deps installs it
    raise ImportError("the tests validate JSON with python3-jsonschema: run scripts/install-deps.sh") from e

SOURCE_DIR = os.environ.get("DASKCAPS_SOURCE_DIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCHEMA_DIR = os.path.join(SOURCE_DIR, "schemas")
ID_PREFIX = "urn:dask-caps:"

_validators: dict[str, jsonschema.Draft202012Validator] = {}


def schema_files() -> dict[str, str]:
    """name -> path of every schemas/<name>.schema.json."""
    out = {}
    for f in sorted(os.listdir(SCHEMA_DIR)):
        if f.endswith(".schema.json"):
            out[f[: -len(".schema.json")]] = os.path.join(SCHEMA_DIR, f)
    return out


def load(name: str) -> dict:
    with open(schema_files()[name], encoding="utf-8") as f:
        return json.load(f)


def validator_for_document(schema_value: str) -> jsonschema.Draft202012Validator:
    """The validator of the schema whose $id names `schema_value`
    ("dask-caps.check/1")."""
    if not _validators:
        for name in schema_files():
            s = load(name)
            jsonschema.Draft202012Validator.check_schema(s)
            _validators[s["$id"][len(ID_PREFIX):]] = jsonschema.Draft202012Validator(s)
    if schema_value not in _validators:
        raise AssertionError("no schema in %s has $id %s%s" % (SCHEMA_DIR, ID_PREFIX, schema_value))
    return _validators[schema_value]


def errors(doc, schema_value: str | None = None) -> list[str]:
    """The validation errors of `doc` (against the schema its "schema" key
    names, or `schema_value`), as "/json/pointer: message" lines."""
    v = validator_for_document(schema_value or doc["schema"])
    return ["/" + "/".join(map(str, e.absolute_path)) + ": " + e.message
            for e in sorted(v.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]


def validate(doc, what: str = "document", schema_value: str | None = None) -> None:
    errs = errors(doc, schema_value)
    if errs:
        raise AssertionError("%s does not validate against its schema (%s):\n  %s"
                             % (what, schema_value or doc.get("schema"), "\n  ".join(errs[:20])))


def checked(p, what: str | None = None):
    """Validates the JSON document a finished dask-caps run printed on
    stdout, when it printed one; returns the CompletedProcess."""
    out = p.stdout
    if isinstance(out, bytes):
        out = out.decode("utf-8", "replace")
    if not out or not out.lstrip().startswith("{"):
        return p
    try:
        doc = json.loads(out)
    except ValueError:
        return p
    if isinstance(doc, dict) and isinstance(doc.get("schema"), str) and doc["schema"].startswith("dask-caps."):
        args = p.args if isinstance(p.args, (list, tuple)) else [p.args]
        validate(doc, what or "output of %s" % " ".join(map(str, args[1:])))
    return p
