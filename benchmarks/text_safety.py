"""Characters a stored string may not carry, shared by the result schema (which refuses
them, naming the field) and the writers (which replace them, so that a document this code
writes is never refused for text a user's model or a tool printed).

- NUL: PostgreSQL's text and jsonb cannot hold it (a stored document would fail at the
  database, naming no field).
- Bidi embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069): they make a
  string display as something else ("Trojan Source"); labels refuse them too.
- In identifiers and one-line values (names, hostnames, keys, paths), every C0 and C1
  control as well: free text keeps tabs, newlines and a tool's colour escapes.
"""

from __future__ import annotations

import re

_EVERYWHERE = "\x00\u202a-\u202e\u2066-\u2069"
UNSAFE_TEXT = re.compile(f"[{_EVERYWHERE}]")
UNSAFE_LINE = re.compile(f"[{_EVERYWHERE}\x01-\x1f\x7f-\x9f]")
REPLACEMENT = "\ufffd"


def problem(value: str, *, line: bool) -> str | None:
    """Why `value` may not be stored (None: it may), naming the first bad character."""
    found = (UNSAFE_LINE if line else UNSAFE_TEXT).search(value)
    if found is None:
        return None
    return (f"must not contain U+{ord(found.group()):04X} (NUL, control or bidi-override "
            f"characters) at position {found.start()}")


def cleaned(value: str) -> str:
    """`value` with the characters no stored text may hold replaced by U+FFFD."""
    return UNSAFE_TEXT.sub(REPLACEMENT, value)
