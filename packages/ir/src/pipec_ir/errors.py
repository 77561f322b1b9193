"""Typed errors for IR documents: callers catch `IRError`, never a KeyError from inside."""


class IRError(Exception):
    """Base class for every problem with an IR document."""


class MalformedIRError(IRError):
    """The bytes are not JSON, or a field is missing or has the wrong type."""


class WrongKindError(IRError):
    """The document is valid IR but not the kind the caller asked for."""


class UnsupportedVersionError(IRError):
    """The document's major version is not one this pipec_ir reads."""


class VerifyError(IRError):
    """The document parsed, but breaks an invariant (dangling name, bad arity, cycle...)."""


class TypeMismatchError(VerifyError):
    """A node's declared type (shape, dtype) contradicts what its op gives for its inputs,
    or its operands' types break the op's contract (docs/IR.md, "Type rules")."""


class AttributeTypeError(VerifyError):
    """A node's attribute has the wrong type or an impossible value (`dims: "two"`)."""


class CacheError(Exception):
    """A compile-cache backend cannot be used at all (an unsafe directory, an unreachable server).

    A backend raises it from any of its methods (docs/plugins.md, "Cache backends"); pipec then
    stops with one line and exit code 2 instead of compiling without the cache the user chose.
    Any other exception from `get`, `put` or `delete` costs one warning, never the compilation.
    Not an `IRError`: it says nothing about a document.
    """
