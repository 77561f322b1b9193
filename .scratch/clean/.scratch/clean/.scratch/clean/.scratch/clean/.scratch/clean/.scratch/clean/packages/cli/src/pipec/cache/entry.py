"""The stored form of one cache entry: a one-line header naming its key and payload digest, then the payload.

    pipec-cache-entry 1 <key> sha256=<hex digest of payload> size=<payload bytes>\\n<payload>

The payload is an IR document's canonical JSON (no pickle anywhere). `unpack_entry`
accepts an entry only if its header is byte for byte the header `pack_entry` would
write for that key and payload, so any changed, missing or extra byte (in the
header or the payload) is detected.
"""

from __future__ import annotations

import hashlib

MAGIC = b"pipec-cache-entry"
FORMAT = 1
_MAX_HEADER = 512


class BadEntry(ValueError):
    """A stored entry failed its check; the message says how."""


def entry_header(key: str, payload: bytes) -> bytes:
    digest = hashlib.sha256(payload).hexdigest()
    return b"%s %d %s sha256=%s size=%d\n" % (MAGIC, FORMAT, key.encode("ascii"), digest.encode("ascii"),
                                             len(payload))


def pack_entry(key: str, payload: bytes) -> bytes:
    return entry_header(key, payload) + payload


def unpack_entry(key: str, data: bytes) -> bytes:
    """The payload of `data` stored under `key`, or BadEntry saying what is wrong with it."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise BadEntry(f"the backend returned {type(data).__name__}, not bytes")
    data = bytes(data)
    end = data.find(b"\n", 0, _MAX_HEADER)
    if end < 0 or not data.startswith(MAGIC + b" "):
        raise BadEntry("not a pipec cache entry (bad header)")
    header, payload = data[: end + 1], data[end + 1:]
    expected = entry_header(key, payload)
    if header == expected:
        return payload
    raise BadEntry(_why(header, expected))


def _why(header: bytes, expected: bytes) -> str:
    got, want = header.split(b" "), expected.split(b" ")
    if len(got) != len(want) or got[:2] != want[:2]:
        return "bad header"
    if got[2] != want[2]:
        return "stored under another key"
    if got[4] != want[4]:
        return "wrong size (truncated or extended)"
    if got[3] != want[3]:
        return "sha256 mismatch"
    return "bad header"
