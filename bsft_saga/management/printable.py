"""Stored text as a command prints it: control characters escaped, never sent raw.

Keys, correlation ids, event types, timer names, user names and host names are whatever a
publisher, a step or a hand-written row put there. Printed raw, an escape sequence
(``\\x1b[2J``) or a carriage return in one rewrites the operator's terminal, and a newline
forges a line of output. Text output passes every such value through :func:`printable`;
JSON output keeps the exact text (``json.dumps`` escapes it already).
"""

from __future__ import annotations

import unicodedata

__all__ = ["printable"]

#: Unicode categories escaped: controls (C0, DEL, C1), format characters (among them the
#: bidirectional overrides that reorder what a terminal shows), lone surrogates, and the line
#: and paragraph separators.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})

_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def printable(text: str) -> str:
    """``text`` with each control, format or separator character written as Python writes
    it in a string literal (``\\x1b``, ``\\r``, ``\\n``, ``\\u202e``); every other character,
    the backslash included, as it is."""
    if text.isprintable():
        return text
    return "".join(
        _escape(char) if unicodedata.category(char) in _ESCAPED_CATEGORIES else char
        for char in text
    )


def _escape(char: str) -> str:
    short = _SHORT.get(char)
    if short is not None:
        return short
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
