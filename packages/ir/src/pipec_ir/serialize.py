"""Canonical JSON for IR documents: `dumps`, `loads`, `digest`.

Decoding is driven by the dataclasses' type hints, so a document either decodes
into exactly the declared types or raises `MalformedIRError` naming the field.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import types
import typing

import sympy

from . import types as ir
from .errors import MalformedIRError, UnsupportedVersionError, WrongKindError
from .symbolic import expr_str, parse_expr
from .verify import verify as verify_document

FORMAT = "pipec-ir"
VERSION = (1, 6)


# ---------------------------------------------------------------- encoding


def _encode_attr(value):
    if isinstance(value, ir.Ref):
        return {"$ref": value.name}
    if isinstance(value, ir.Dtype):
        return {"$dtype": value.name}
    if isinstance(value, ir.Device):
        return {"$device": True}
    if isinstance(value, ir.Size):
        return {"$size": value.expr}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    if isinstance(value, tuple):
        return [_encode_attr(v) for v in value]
    return value


# per dataclass: its fields with their type hints, and per hint its arguments: worked out once
# (a BERT Program has ~40,000 values; asking `dataclasses` and `typing` for each was most of `dumps`)
_FIELDS: dict[type, tuple[tuple[str, object], ...] | None] = {}
_ARGS: dict[object, tuple] = {}


def _fields_of(cls) -> tuple[tuple[str, object], ...] | None:
    """The (name, hint) of each field of dataclass `cls`; None for any other type."""
    if cls not in _FIELDS:
        _FIELDS[cls] = (tuple((f.name, _hints(cls)[f.name]) for f in dataclasses.fields(cls))
                        if dataclasses.is_dataclass(cls) else None)
    return _FIELDS[cls]


@functools.lru_cache(maxsize=1 << 16)
def _expr_text(expr) -> str:
    return expr_str(expr)  # equal expressions print alike: one print per distinct size


def to_jsonable(value, hint=None):
    fields = _fields_of(type(value))  # a dataclass instance (a class itself is of type `type`)
    if fields is not None:
        return {name: to_jsonable(getattr(value, name), h) for name, h in fields}
    if hint is tuple:  # Attrs
        return [[k, _encode_attr(v)] for k, v in value]
    if isinstance(value, sympy.Basic):
        return _expr_text(value)
    if isinstance(value, tuple):
        args = _ARGS.get(hint) if hint is not None else ()
        if args is None:
            args = _ARGS[hint] = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return [to_jsonable(v, args[0]) for v in value]
        if args:
            return [to_jsonable(v, h) for v, h in zip(value, args)]
        return [to_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    return value


def dumps(doc) -> str:
    kind = ir.KIND_OF.get(type(doc))
    if kind is None:
        raise TypeError(f"not an IR document: {type(doc).__name__}")
    payload = {"format": FORMAT, "kind": kind, "version": list(VERSION), "document": to_jsonable(doc)}
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)


def digest(doc) -> str:
    """sha256 of the canonical bytes: the basis of every cache key."""
    return hashlib.sha256(dumps(doc).encode()).hexdigest()


# ---------------------------------------------------------------- decoding

_HINT_CACHE: dict[type, dict] = {}


def _hints(cls):
    if cls not in _HINT_CACHE:
        _HINT_CACHE[cls] = typing.get_type_hints(cls, vars(ir))
    return _HINT_CACHE[cls]


def _decode_attr(value, path):
    if isinstance(value, list):
        return tuple(_decode_attr(v, path) for v in value)
    if isinstance(value, dict):
        if set(value) == {"$ref"} and isinstance(value["$ref"], str):
            return ir.Ref(value["$ref"])
        if set(value) == {"$dtype"} and value["$dtype"] in ir.DTYPES:
            return ir.Dtype(value["$dtype"])
        if set(value) == {"$device"}:
            return ir.Device()
        if set(value) == {"$size"} and isinstance(value["$size"], str):
            try:
                parse_expr(value["$size"])
            except Exception:  # sympy raises many types
                raise MalformedIRError(f"{path}: cannot parse size expression {value['$size']!r}") from None
            return ir.Size(value["$size"])
        if set(value) == {"$float"} and value["$float"] in ("inf", "-inf", "nan"):
            return float(value["$float"])
        raise MalformedIRError(f"{path}: unknown tagged value {value!r}")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise MalformedIRError(f"{path}: bad attribute value {value!r}")


def from_jsonable(data, hint, path="document"):
    origin = typing.get_origin(hint)
    if hint is tuple:  # Attrs: [[key, value], ...]
        if not isinstance(data, list) or not all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in data
        ):
            raise MalformedIRError(f"{path}: expected a list of [key, value] pairs")
        return tuple((k, _decode_attr(v, f"{path}.{k}")) for k, v in data)
    if dataclasses.is_dataclass(hint):
        if not isinstance(data, dict):
            raise MalformedIRError(f"{path}: expected an object for {hint.__name__}, got {type(data).__name__}")
        hints = _hints(hint)
        names = {f.name for f in dataclasses.fields(hint)}
        unknown = set(data) - names
        if unknown:
            raise MalformedIRError(f"{path}: unknown field(s) {sorted(unknown)} in {hint.__name__}")
        kwargs = {}
        for f in dataclasses.fields(hint):
            if f.name not in data:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise MalformedIRError(f"{path}: {hint.__name__} is missing field '{f.name}'")
                continue
            kwargs[f.name] = from_jsonable(data[f.name], hints[f.name], f"{path}.{f.name}")
        return hint(**kwargs)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if data is None and type(None) in options:
            return None
        last = None
        for opt in options:
            if opt is type(None):
                continue
            try:
                return from_jsonable(data, opt, path)
            except MalformedIRError as exc:
                last = exc
        raise last or MalformedIRError(f"{path}: unexpected value {data!r}")
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(data, list):
            raise MalformedIRError(f"{path}: expected a list, got {type(data).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_jsonable(v, args[0], f"{path}[{i}]") for i, v in enumerate(data))
        if len(args) != len(data):
            raise MalformedIRError(f"{path}: expected {len(args)} items, got {len(data)}")
        return tuple(from_jsonable(v, h, f"{path}[{i}]") for i, (v, h) in enumerate(zip(data, args)))
    if hint is sympy.Expr:
        if isinstance(data, int) and not isinstance(data, bool):
            return sympy.Integer(data)
        if not isinstance(data, str):
            raise MalformedIRError(f"{path}: expected a size expression string, got {data!r}")
        try:
            return parse_expr(data)
        except Exception:  # sympy raises many types
            raise MalformedIRError(f"{path}: cannot parse size expression {data!r}") from None
    if hint is float:
        if isinstance(data, dict) and set(data) == {"$float"}:
            return float(data["$float"])
        if isinstance(data, int | float) and not isinstance(data, bool):
            return float(data)
        raise MalformedIRError(f"{path}: expected a number, got {data!r}")
    if hint is int:
        if isinstance(data, int) and not isinstance(data, bool):
            return data
        raise MalformedIRError(f"{path}: expected an integer, got {data!r}")
    if hint is bool or hint is str:
        if isinstance(data, hint):
            return data
        raise MalformedIRError(f"{path}: expected {hint.__name__}, got {data!r}")
    raise MalformedIRError(f"{path}: cannot decode into {hint!r}")


# ---------------------------------------------------------------- fast decoding
#
# `from_jsonable` walks type hints on every value, which dominates warm compiles
# (cache hits are all decoding). `_fast_decoder(hint)` builds a closure per type once;
# any failure falls back to `from_jsonable`, which raises the precise MalformedIRError.

_FAST: dict = {}


class _Mismatch(Exception):
    pass


def _fast_decoder(hint):
    if hint in _FAST:
        return _FAST[hint]
    _FAST[hint] = None  # recursion guard (recursive types fall back to the slow path)
    dec = _build_fast(hint)
    _FAST[hint] = dec
    return dec


def _build_fast(hint):
    origin = typing.get_origin(hint)
    if hint is tuple:
        def attrs(data):
            if type(data) is not list:
                raise _Mismatch
            out = []
            for pair in data:
                if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not str:
                    raise _Mismatch
                out.append((pair[0], _decode_attr(pair[1], "")))
            return tuple(out)
        return attrs
    if dataclasses.is_dataclass(hint):
        hints = _hints(hint)
        fields = [(f.name, hints[f.name], f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                  for f in dataclasses.fields(hint)]
        names = frozenset(f[0] for f in fields)

        def dataclass_(data):
            if type(data) is not dict or not names.issuperset(data):
                raise _Mismatch
            kwargs = {}
            for name, h, required in fields:
                if name in data:
                    kwargs[name] = (_FAST.get(h) or _fast_decoder(h))(data[name])
                elif required:
                    raise _Mismatch
            return hint(**kwargs)
        return dataclass_
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        nullable = len(options) < len(typing.get_args(hint))
        decs = [_fast_decoder(a) for a in options]

        def union(data):
            if data is None and nullable:
                return None
            for d in decs:
                try:
                    return d(data)
                except Exception:
                    continue
            raise _Mismatch
        return union
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            item = _fast_decoder(args[0])

            def seq(data):
                if type(data) is not list:
                    raise _Mismatch
                return tuple(item(v) for v in data)
            return seq
        items = [_fast_decoder(a) for a in args]

        def fixed(data):
            if type(data) is not list or len(data) != len(items):
                raise _Mismatch
            return tuple(d(v) for d, v in zip(items, data))
        return fixed
    if hint is sympy.Expr:
        def expr(data):
            if type(data) is str:
                return parse_expr(data)
            if type(data) is int:
                return sympy.Integer(data)
            raise _Mismatch
        return expr
    if hint in (int, str, bool):
        def exact(data):
            if type(data) is not hint:
                raise _Mismatch
            return data
        return exact
    if hint is float:
        def number(data):
            if type(data) in (int, float):
                return float(data)
            raise _Mismatch
        return number
    return lambda data: from_jsonable(data, hint)


def _decode(data, hint):
    try:
        return _fast_decoder(hint)(data)
    except Exception:
        return from_jsonable(data, hint)  # raises the precise error


def loads(text: str | bytes, kind: str | None = None, *, verify: bool = True):
    """Parse and validate an IR document; `kind` ("graph", "kernel_plan", "program") is checked if given.

    The document is also verified (`pipec_ir.verify`: structure and every node's type), so a
    document that contradicts itself raises a `VerifyError` naming the node; `verify=False`
    only parses (for tools that inspect broken documents).
    """
    try:
        payload = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedIRError(f"not valid JSON: {exc}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise MalformedIRError("not a pipec-ir document (missing header 'format': 'pipec-ir')")
    version = payload.get("version")
    if not (isinstance(version, list) and len(version) == 2 and all(isinstance(v, int) for v in version)):
        raise MalformedIRError("header 'version' must be [major, minor]")
    if version[0] != VERSION[0]:
        raise UnsupportedVersionError(
            f"IR version {version[0]}.{version[1]} is not supported (this pipec-ir reads {VERSION[0]}.x)"
        )
    doc_kind = payload.get("kind")
    if doc_kind not in ir.DOCUMENT_KINDS:
        raise MalformedIRError(f"unknown document kind {doc_kind!r}")
    if kind is not None and doc_kind != kind:
        raise WrongKindError(f"expected a {kind} document, got a {doc_kind}")
    if "document" not in payload:
        raise MalformedIRError("missing 'document'")
    doc = _decode(payload["document"], ir.DOCUMENT_KINDS[doc_kind])
    return verify_document(doc) if verify else doc
