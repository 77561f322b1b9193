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
VERSION = (1, 9)

_PLAIN = (str, int, bool, type(None))  # JSON scalars that are written as they are


# ---------------------------------------------------------------- encoding


def _encode_attr(value):
    if type(value) in _PLAIN:  # most attributes: nothing below applies
        return value
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


# ---------------------------------------------------------------- fast encoding
#
# `to_jsonable` asks every value what it is (~200,000 values in a BERT KernelPlan): most of
# `dumps`. `_encoder(hint)` builds, once per type hint, a function that knows what the field
# holds. It is `to_jsonable` specialised, and exact by construction:
# - a value of another type than its hint says is handed to `to_jsonable`;
# - a value whose encoder is None (strings, ints, bools, None, tuples of them) goes to
#   `json.dumps` as it is. There `to_jsonable` only converts dataclasses, sympy objects and
#   non-finite floats, and each of these makes `json.dumps` raise: `dumps` then starts over
#   with `to_jsonable`. (json writes a tuple as it writes a list.)


@functools.cache  # a pure function of the hint (IR types are fixed at import)
def _encoder(hint):
    """A function giving `to_jsonable(value, hint)` for values of type `hint`, or None: such a
    value serializes as it is."""
    if hint in _PLAIN:
        return None
    if hint is tuple:  # Attrs
        return _encode_attrs
    if dataclasses.is_dataclass(hint):
        return _dataclass_encoder(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _sequence_encoder(hint, _encoder(args[0]))
    if origin is tuple:
        return _fixed_encoder(hint, [_encoder(a) for a in args])
    if hint is sympy.Expr:
        return _encode_expr
    if hint is float:
        return _encode_float
    if origin in (typing.Union, types.UnionType) and all(a in _PLAIN for a in args):
        # not None: `to_jsonable` treats a tuple in such a field unlike json (zips it with the union)
        return lambda value: value if type(value) in _PLAIN else to_jsonable(value, hint)
    return lambda value: to_jsonable(value, hint)


def _dataclass_encoder(cls):
    fields = [(name, _encoder(h)) for name, h in _fields_of(cls)]

    def encode(value):
        if type(value) is not cls:
            return to_jsonable(value, cls)
        out = {}
        for name, enc in fields:
            v = getattr(value, name)
            out[name] = v if enc is None else enc(v)
        return out
    return encode


def _sequence_encoder(hint, item):
    if item is None:  # tuple[str, ...]: json writes it as it is
        return None
    if item is _encode_expr:
        return _expr_sequence_encoder(hint)

    def encode(value):
        if type(value) is not tuple:
            return to_jsonable(value, hint)
        return [item(v) for v in value]
    return encode


def _expr_sequence_encoder(hint):
    # shapes and domains, a third of the values of a document: `_encode_expr` inlined
    def encode(value):
        if type(value) is not tuple:
            return to_jsonable(value, hint)
        return [_expr_text(v) if isinstance(v, sympy.Basic) else to_jsonable(v, sympy.Expr) for v in value]
    return encode


def _fixed_encoder(hint, items):
    def encode(value):
        if type(value) is not tuple:
            return to_jsonable(value, hint)
        return [v if enc is None else enc(v) for enc, v in zip(items, value)]  # zip: as `to_jsonable`
    return encode


def _encode_attrs(value):
    if type(value) is not tuple:
        return to_jsonable(value, tuple)
    return [[k, _encode_attr(v)] for k, v in value]


def _encode_expr(value):
    return _expr_text(value) if isinstance(value, sympy.Basic) else to_jsonable(value, sympy.Expr)


def _encode_float(value):
    return {"$float": repr(value)} if type(value) is float and not math.isfinite(value) else value


def dumps(doc) -> str:
    kind = ir.KIND_OF.get(type(doc))
    if kind is None:
        raise TypeError(f"not an IR document: {type(doc).__name__}")
    try:
        return _canonical_json(kind, _encoder(type(doc))(doc))
    except (TypeError, ValueError):  # a field holds another type than declared: the generic walk decides
        return _canonical_json(kind, to_jsonable(doc))


def _canonical_json(kind: str, body) -> str:
    payload = {"format": FORMAT, "kind": kind, "version": list(VERSION), "document": body}
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
    if type(value) in _PLAIN or type(value) is float:  # most attributes: nothing below applies
        return value
    if isinstance(value, list):
        return tuple([_decode_attr(v, path) for v in value])  # a list first: faster than a generator
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
        return _fast_attrs
    if hint is ir.TensorType:
        return _fast_tensor_type(_fast_dataclass(hint))
    if dataclasses.is_dataclass(hint):
        return _fast_dataclass(hint)
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
            return _fast_sequence(args[0])
        items = [_fast_decoder(a) for a in args]

        def fixed(data):
            if type(data) is not list or len(data) != len(items):
                raise _Mismatch
            return tuple([d(v) for d, v in zip(items, data)])
        return fixed
    if hint is sympy.Expr:
        return _fast_expr
    if hint in _EXACT:
        def exact(data):
            if type(data) is not hint:
                raise _Mismatch
            return data
        return exact
    if hint is float:
        def number(data):
            if type(data) in (int, float):
                return float(data)
            if type(data) is dict and data.keys() == {"$float"}:  # as `from_jsonable`
                return float(data["$float"])
            raise _Mismatch
        return number
    return lambda data: from_jsonable(data, hint)


_EXACT = (str, int, bool)  # JSON gives exactly these types: a field of one is checked inline
_ABSENT = object()


def _fast_dataclass(cls):
    hints = _hints(cls)
    # per field: name, its type if in _EXACT (no call per value), else its decoder, and the field
    fields = [(f.name, hints[f.name] if hints[f.name] in _EXACT else None, _field_decoder(hints[f.name]), f)
              for f in dataclasses.fields(cls)]
    names = frozenset(f[0] for f in fields)

    def dataclass_(data):
        if type(data) is not dict or not names.issuperset(data):
            raise _Mismatch
        args = []  # positional, in field order: cheaper than keywords
        for name, exact, dec, f in fields:
            value = data.get(name, _ABSENT)
            if value is _ABSENT:
                args.append(_default(f))
            elif exact is None:
                args.append(dec(value))
            elif type(value) is exact:
                args.append(value)
            else:
                raise _Mismatch
        return cls(*args)
    return dataclass_


def _field_decoder(hint):
    dec = _fast_decoder(hint)
    # None: `hint` is being built (a recursive type): look it up when a value comes
    return dec if dec is not None else lambda data: _fast_decoder(hint)(data)


def _default(f: dataclasses.Field):
    """The value a missing field gets, as the dataclass' __init__ would give it."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise _Mismatch  # a required field


def _fast_sequence(item):
    """Decoder of tuple[item, ...]. Lists of one type are checked in one go (`set(map(type, ...))`,
    C loops): they are most of a document (node inputs, shapes)."""
    if item in _EXACT:
        only = {item}

        def exact_items(data):
            if type(data) is not list or not set(map(type, data)) <= only:
                raise _Mismatch
            return tuple(data)
        return exact_items
    if item is sympy.Expr:
        def exprs(data):
            if type(data) is not list:
                raise _Mismatch
            if set(map(type, data)) <= _STR_ONLY:
                return tuple(map(parse_expr, data))
            return tuple([_fast_expr(v) for v in data])
        return exprs
    dec = _field_decoder(item)

    def seq(data):
        if type(data) is not list:
            raise _Mismatch
        return tuple([dec(v) for v in data])
    return seq


_STR_ONLY = frozenset({str})


def _fast_tensor_type(general):
    """Decoder of TensorType. A BERT graph has ~2,300 node types but ~50 distinct ones: each
    distinct (shape, dtype) is decoded once (`_tensor_type`); other forms (int sizes, a missing
    or unknown field) take the `general` dataclass decoder."""
    def tensor_type(data):
        if type(data) is dict and data.keys() == _TENSOR_TYPE_KEYS:
            shape, dtype = data["shape"], data["dtype"]
            if type(shape) is list and type(dtype) is str and set(map(type, shape)) <= _STR_ONLY:
                return _tensor_type(tuple(shape), dtype)
        return general(data)
    return tensor_type


_TENSOR_TYPE_KEYS = frozenset({"shape", "dtype"})


@functools.lru_cache(maxsize=4096)
def _tensor_type(shape: tuple[str, ...], dtype: str) -> ir.TensorType:
    # A pure function of the strings (`parse_expr` is one), and its result is immutable: documents
    # may share it, as they share parsed sizes. The key holds only strings (a JSON `true` would
    # hash like 1): `_fast_tensor_type` checks the types before it asks.
    return ir.TensorType(tuple(map(parse_expr, shape)), dtype)


def _fast_expr(data):
    if type(data) is str:
        return parse_expr(data)
    if type(data) is int:
        return sympy.Integer(data)
    raise _Mismatch


def _fast_attrs(data):
    if type(data) is not list:
        raise _Mismatch
    out = []
    for pair in data:
        if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not str:
            raise _Mismatch
        out.append((pair[0], _decode_attr(pair[1], "")))
    return tuple(out)


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
