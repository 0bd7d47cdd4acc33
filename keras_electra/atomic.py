"""Whole-file writes that a kill cannot leave half done.

Run, fine-tuning and export directories are read back by resumed runs, by
``keras-electra report`` while a run is going, and by TF Serving: a file there is
either the old one or the new one, never a prefix. :func:`write_atomic` writes a
sibling temporary file and renames it over the target (atomic on POSIX file
systems); a failed write removes the temporary file and re-raises.
"""

from __future__ import annotations

import json
from pathlib import Path


def write_atomic(path: str | Path, text: str | bytes) -> Path:
    """Replace ``path``'s contents with ``text`` (UTF-8 if a str) in one rename; return the path.

    Examples:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "state.json"
        >>> write_atomic(target, "{}\\n").read_text()
        '{}\\n'
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(text) if isinstance(text, bytes) else tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | Path, value, indent: int | None = 2) -> Path:
    """:func:`write_atomic` of ``value`` as JSON and a final newline."""
    return write_atomic(path, json.dumps(value, indent=indent) + "\n")
