"""JSON Schemas of the IR documents, generated from the dataclasses.

The committed copies live in `schemas/<major>.<minor>/`; the test suite fails when
the generated schema differs from the committed one of the current version, so a
change to the IR types cannot ship without a version bump.

Regenerate after bumping `serialize.VERSION`:  python -m pipec_ir.schema --write
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from pathlib import Path

import sympy

from . import types as ir
from .serialize import FORMAT, VERSION, _hints

SCHEMA_DIR = Path(__file__).parent / "schemas"

_ATTR_VALUE = {
    "anyOf": [
        {"type": ["null", "boolean", "integer", "number", "string"]},
        {"type": "array", "items": {"$ref": "#/$defs/AttrValue"}},
        {"type": "object", "properties": {"$ref": {"type": "string"}}, "required": ["$ref"], "additionalProperties": False},
        {"type": "object", "properties": {"$dtype": {"enum": list(ir.DTYPES)}}, "required": ["$dtype"], "additionalProperties": False},
        {"type": "object", "properties": {"$device": {"const": True}}, "required": ["$device"], "additionalProperties": False},
        {"type": "object", "properties": {"$size": {"type": "string"}}, "required": ["$size"], "additionalProperties": False},
        {"type": "object", "properties": {"$float": {"enum": ["inf", "-inf", "nan"]}}, "required": ["$float"], "additionalProperties": False},
    ]
}


def _schema(hint, defs):
    origin = typing.get_origin(hint)
    if hint is tuple:
        return {"type": "array", "items": {"type": "array", "prefixItems": [{"type": "string"}, {"$ref": "#/$defs/AttrValue"}],
                                           "minItems": 2, "maxItems": 2}}
    if dataclasses.is_dataclass(hint):
        name = hint.__name__
        if name not in defs:
            defs[name] = {}
            hints = _hints(hint)
            fields = dataclasses.fields(hint)
            defs[name] = {
                "type": "object",
                "properties": {f.name: _schema(hints[f.name], defs) for f in fields},
                "required": [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING],
                "additionalProperties": False,
            }
        return {"$ref": f"#/$defs/{name}"}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_schema(a, defs) for a in typing.get_args(hint)]}
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _schema(args[0], defs)}
        return {"type": "array", "prefixItems": [_schema(a, defs) for a in args], "minItems": len(args), "maxItems": len(args)}
    if hint is sympy.Expr:
        return {"type": "string", "description": "sympy size expression"}
    simple = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
    if hint in simple:
        return {"type": simple[hint]}
    raise TypeError(f"no schema for {hint!r}")


def json_schema(kind: str) -> dict:
    defs: dict = {"AttrValue": _ATTR_VALUE}
    body = _schema(ir.DOCUMENT_KINDS[kind], defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"pipec-ir {kind} {VERSION[0]}.{VERSION[1]}",
        "type": "object",
        "properties": {
            "format": {"const": FORMAT},
            "kind": {"const": kind},
            "version": {"type": "array", "prefixItems": [{"const": VERSION[0]}, {"type": "integer"}]},
            "document": body,
        },
        "required": ["format", "kind", "version", "document"],
        "$defs": dict(sorted(defs.items())),
    }


def schema_text(kind: str) -> str:
    return json.dumps(json_schema(kind), indent=1, sort_keys=True) + "\n"


def committed_path(kind: str) -> Path:
    return SCHEMA_DIR / f"{VERSION[0]}.{VERSION[1]}" / f"{kind}.schema.json"


def main(argv: list[str]) -> int:
    if "--write" in argv:
        for kind in ir.DOCUMENT_KINDS:
            path = committed_path(kind)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(schema_text(kind))
            print(f"wrote {path}")
        return 0
    for kind in ir.DOCUMENT_KINDS:
        print(schema_text(kind))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
