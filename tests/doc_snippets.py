"""The ```python blocks of the user's pages (README.md, serving/README.md, docs/), found
by the heading they stand under, and run by the tests named in ``RUN_BY`` with the
page's addresses, files and sizes swapped for the test's own; ``SKIPPED`` says why a
block cannot run here. tests/test_docs.py checks that every block is in one of them."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (page, heading) -> the test file that runs the block under that heading.
RUN_BY = {
    ("README.md", "## Export and serving"): "test_walkthrough.py",
    ("README.md", "## Python API"): "test_save_run.py",
    ("docs/pretraining.md", "## From Python"): "test_save_run.py",
    ("serving/README.md", "## 3. First queries"): "test_electric_run.py",
    ("serving/README.md", "## 4. Re-ranking n-best lists (Electric)"): "test_electric_run.py",
    ("serving/README.md", "## Exposing the server"): "test_serving_secure.py",
    ("serving/README.md", "## Testing without Docker"): "test_walkthrough.py",
    (
        "docs/quickstart.md",
        "## 1. Released weights → your CSV → a server that answers with class scores",
    ): "test_quickstart.py",
    ("docs/quickstart.md", "## 3. A server behind TLS, with a token, from Python"): (
        "test_serving_secure.py"
    ),
}
SKIPPED = {
    ("docs/checkpoints.md", "## What each source needs"): (
        "keras-hub's own from_preset fetches the preset from Kaggle, which this machine "
        "cannot reach; converting a preset saved locally is tests/test_convert.py's"
    ),
}


def pages() -> list[Path]:
    return [REPO / "README.md", REPO / "serving" / "README.md", *sorted(REPO.glob("docs/**/*.md"))]


def python_blocks(page: Path) -> list[tuple[str, str]]:
    """``(heading, code)`` of each ```python block of ``page``, in order; the heading is
    the last ``#`` line above the block, outside code blocks."""
    blocks, heading, fence, code = [], "", None, []
    for line in page.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if fence is None:
            if stripped.startswith("```"):
                fence, code = stripped, []
            elif stripped.startswith("#"):
                heading = stripped
        elif stripped == "```":
            if fence == "```python":
                blocks.append((heading, "\n".join(code) + "\n"))
            fence = None
        else:
            code.append(line)
    return blocks


def snippet(page: str, heading: str) -> str:
    """The one ```python block of ``page`` under ``heading``, its indentation removed."""
    found = [code for h, code in python_blocks(REPO / page) if h == heading]
    assert len(found) == 1, f"{page} has {len(found)} python blocks under {heading!r}"
    lines = found[0].splitlines()
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return "\n".join(line[indent:] for line in lines) + "\n"


def swapped(code: str, swaps: dict[str, str]) -> str:
    """``code`` with each key replaced by its value; each key must be there (a page that
    changed its addresses or sizes fails here, naming it, not later)."""
    for old, new in swaps.items():
        assert old in code, f"the snippet no longer has {old!r}:\n{code}"
        code = code.replace(old, new)
    return code


def run_here(code: str, swaps: dict[str, str], names: dict | None = None) -> str:
    """Run the swapped ``code`` in this process (with ``names`` defined); return what it
    printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(swapped(code, swaps), "<snippet>", "exec"), dict(names or {}))  # noqa: S102
    return printed.getvalue()
