"""Readers for fine-tuning data (tables, CoNLL, SQuAD JSON), with errors that name the
file, line and problem."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from keras_electra.errors import InputDataError

_TAG = re.compile(r"^(O|[BIES]-\S+)$")
_JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")  # JSON lines (tables), or JSON


def _open_lines(path: Path, keepends: bool = False) -> list[str]:
    if path.is_dir():
        raise InputDataError(
            f"'{path}' is a directory; pass a data file (TSV, CSV, JSONL, CoNLL or SQuAD JSON)."
        )
    if not path.is_file():
        raise InputDataError(f"Data file '{path}' does not exist; check the path.")
    try:
        text = path.read_text(encoding="utf-8-sig")  # "\r\n" and "\r" are read as "\n"
    except UnicodeDecodeError as e:
        raise InputDataError(
            f"{path} is not UTF-8 text (byte {e.start}); re-save it as UTF-8."
        ) from None
    # Only a line feed ends a line: str.splitlines would also cut at characters a text or a
    # JSON string may hold (\x85, \x0c, \u2028, ...), splitting one row into two.
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line + "\n" for line in lines] if keepends else lines


def _json(text: str, path: Path, fix: str, line: int | None = None):
    """The JSON value of ``text`` (all of ``path``, or its ``line``), or one sentence."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        where = f"{path}:{line or e.lineno}"
        raise InputDataError(f"{where}: not valid JSON ({e.msg}); {fix}.") from None


def _table_rows(path: Path) -> Iterator[tuple[int, list[str] | dict]]:
    """(line number, fields) per data row; fields is a dict for JSON lines."""
    suffix = path.suffix.lower()
    # A table keeps its line ends: a quoted CSV field may hold a line break, which the
    # csv module then keeps (without them it would glue the two lines' words together).
    lines = _open_lines(path, keepends=suffix in (".tsv", ".csv", ".txt"))
    if suffix in _JSON_SUFFIXES:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            value = _json(line, path, "write one JSON object per line", number)
            if not isinstance(value, dict):
                raise InputDataError(f"{path}:{number}: expected a JSON object, not {value!r:.40}.")
            yield number, value
        return
    if suffix not in (".tsv", ".csv", ".txt"):
        raise InputDataError(f"{path}: unknown table format '{suffix}'; use .tsv, .csv or .jsonl.")
    if suffix == ".csv":
        reader = csv.reader(lines)
    else:  # GLUE TSV files are not quoted: quotes are part of the text
        reader = csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
    # A text may be as long as a document: the csv module's default limit (128 KiB a
    # field) would stop the read with a csv.Error; the model cuts long texts itself.
    csv.field_size_limit(max(csv.field_size_limit(), _FIELD_LIMIT))
    for fields in reader:
        if any(f.strip() for f in fields):  # blank rows are skipped
            yield reader.line_num, fields


_FIELD_LIMIT = 2**31 - 1  # the largest field size the csv module takes on every platform

# The column separator of each table format, and its name in an error.
_SEPARATORS = {".csv": ",", ".tsv": "\t", ".txt": "\t"}
_SEPARATOR_NAMES = {".csv": "commas", ".tsv": "tabs", ".txt": "tabs"}


def _column_index(
    path: Path, names: list[str] | None, column: str | int, role: str, fixed: bool = False
) -> int:
    """Where ``column`` (a name, or a 0-based index) is among the header's ``names``;
    ``fixed``: the columns are a fine-tuned model's (``predict`` has no column flags)."""
    shown = ", ".join(names or []) or "none (the file has no header row)"
    if isinstance(column, int) or str(column).isdigit():
        index = int(column)
        if names is not None and index >= len(names):
            raise InputDataError(
                f"{path}: no {role} column {index} (0-based; the file has {len(names)}: "
                f"{shown}); pass a column name or an index below {len(names)}."
            )
        return index
    if names is None or column not in names:
        fix = "pass the right column name or a 0-based index"
        if fixed:
            fix = (
                f"the model reads the columns it was fine-tuned on: name the file's {role} "
                f"column '{column}'"
            )
        if names is not None and len(names) == 1:  # the header did not split: another separator
            suffix = path.suffix.lower()
            seen = next((c for c in ",;\t|" if c in names[0] and c != _SEPARATORS[suffix]), None)
            if seen is not None:
                fix = (
                    f"the header row is one column holding {seen!r}, but a {suffix} file's "
                    f"columns are separated by {_SEPARATOR_NAMES[suffix]}: save it with those "
                    "(commas as .csv, tabs as .tsv)"
                )
        raise InputDataError(f"{path}: no {role} column '{column}' (columns: {shown}); {fix}.")
    return names.index(column)


def read_table(
    path: str | Path,
    text_column: str | int = "text",
    text_pair_column: str | int | None = None,
    label_column: str | int | None = "label",
    *,
    header: bool = True,
    require_labels: bool = True,
) -> list[dict]:
    """Read text (or text pairs) and labels from a table.

    Args:
        path: the file: GLUE ``.tsv`` (not quoted), ``.csv`` or ``.jsonl``.
        text_column: column of the first text (name, or 0-based index).
        text_pair_column: column of the second text of a pair, if any.
        label_column: column of the label; None for unlabelled files.
        header: the first TSV/CSV row names the columns.
        require_labels: a row without a label is an error (else label is None).

    Returns:
        One dict per row: ``text``, ``text_b`` (or None), ``label`` (a string, or
        None), ``file`` and ``line`` (where the row is).

    Raises:
        InputDataError: a missing column, a short row, an empty text or label.
    """
    path = Path(path)
    rows = _table_rows(path)
    names: list[str] | None = None
    json_lines = path.suffix.lower() in _JSON_SUFFIXES
    if header and not json_lines:
        first = next(rows, None)
        if first is None:
            raise InputDataError(f"{path} is empty; it needs a header row and data rows.")
        names = [n.strip() for n in first[1]]
    wanted = {"text": text_column, "text_b": text_pair_column, "label": label_column}
    wanted = {k: v for k, v in wanted.items() if v is not None}
    label = str(label_column)
    if not require_labels and names is not None and label not in names and not label.isdigit():
        wanted.pop("label", None)  # unlabelled input: a missing label column is fine
    # Where each value is: a JSON object's key, or a table row's index.
    keys = {
        k: str(v)
        if json_lines
        else _column_index(path, names, v, k.replace("text_b", "text pair"), not require_labels)
        for k, v in wanted.items()
    }
    examples = []
    for number, fields in rows:
        row = {"text": None, "text_b": None, "label": None, "file": str(path), "line": number}
        values = fields if json_lines else dict(enumerate(fields))
        if names is not None and any(f.strip() for f in fields[len(names) :]):
            raise InputDataError(
                f"{path}:{number}: the row has {len(fields)} fields but the header names "
                f"{len(names)}; a text holding the separator splits in two (quote the field "
                "in a .csv, remove the tab in a .tsv)."
            )
        for key, column in keys.items():
            if column in values:
                row[key] = _scalar(values[column], path, number, key)
            elif key == "label" and not require_labels:
                continue
            elif json_lines:
                fix = "pass the right column name"
                if not require_labels:  # predict: the fine-tuned model's columns
                    fix = (
                        "the model reads the fields it was fine-tuned on: name the file's "
                        f"{'text pair' if key == 'text_b' else key} field '{column}'"
                    )
                raise InputDataError(
                    f"{path}:{number}: no '{column}' field (fields: {', '.join(fields)}); {fix}."
                )
            else:
                raise InputDataError(
                    f"{path}:{number}: the row has {len(fields)} fields but the {key} column "
                    f"is number {column + 1}; fix the row (is a tab or comma missing?)."
                )
        for key in ("text", "text_b"):
            if key in wanted and not (row[key] or "").strip():
                raise InputDataError(
                    f"{path}:{number}: the {'text pair' if key == 'text_b' else 'text'} is empty; "
                    "remove the row or fill it in."
                )
        row["label"] = (row["label"] or "").strip() or None  # an unlabelled row's is None
        if "label" in wanted and row["label"] is None and require_labels:
            raise InputDataError(f"{path}:{number}: the label is empty; label the row.")
        examples.append(row)
    if not examples:
        raise InputDataError(f"{path} has no data rows; add examples.")
    return examples


def _scalar(value, path: Path, number: int, key: str) -> str:
    """A row's value as text: a JSON list or object as a text or label would become its
    Python spelling (``"['pos']"``, a class of its own), so it is refused."""
    if value is None:
        return ""
    if isinstance(value, list | dict):
        role = {"text_b": "text pair"}.get(key, key)
        raise InputDataError(
            f"{path}:{number}: the {role} is a JSON {type(value).__name__}, not one value; "
            f"write one {role} per row (a string or a number)."
        )
    return str(value)


# === CoNLL ===


@dataclass
class TaggedSentence:
    """One sentence of a tagging file: words, their tags, and its first line number."""

    words: list[str]
    tags: list[str]
    line: int
    file: str = ""


def read_conll(path: str | Path, *, require_tags: bool = True) -> list[TaggedSentence]:
    """Read a CoNLL-style file: ``word [other columns] tag`` per line, blank between sentences.

    Tags must be ``O`` or ``B-``/``I-``/``E-``/``S-`` followed by a type (BIO or BIOES).
    With ``require_tags=False``, a line holding only a word gets the tag ``O``.
    """
    path = Path(path)
    if path.suffix.lower() in _JSON_SUFFIXES:  # its lines would read as words and tags
        raise InputDataError(
            f"{path}: tagging reads CoNLL text ('word tag' per line, a blank line between "
            "sentences), not JSON; write the file in that form."
        )
    sentences: list[TaggedSentence] = []
    words, tags, start = [], [], 0
    for number, line in enumerate([*_open_lines(path), ""], 1):
        parts = line.split()
        if not parts or parts[0] == "-DOCSTART-":
            if words:
                sentences.append(TaggedSentence(words, tags, start, str(path)))
            words, tags = [], []
            continue
        if len(parts) < 2 and require_tags:
            raise InputDataError(
                f"{path}:{number}: expected 'word tag' but found one column; add the tag "
                "(separated by a space or tab)."
            )
        tag = parts[-1] if len(parts) >= 2 else "O"
        if not _TAG.match(tag) and not require_tags:  # predict: a sentence on one line?
            raise InputDataError(
                f"{path}:{number}: the line holds {len(parts)} words and no BIO/BIOES tag, "
                "but a CoNLL line is one word (then, optionally, its tag, which predict "
                "ignores); write one word per line, a blank line between sentences."
            )
        if not _TAG.match(tag):
            raise InputDataError(
                f"{path}:{number}: tag '{tag}' is not BIO/BIOES (O, B-X, I-X, E-X or S-X); "
                "fix the tag column (the last one)."
            )
        if not words:
            start = number
        words.append(parts[0])
        tags.append(tag)
    if not sentences:
        raise InputDataError(f"{path} has no tagged sentences; add 'word tag' lines.")
    return sentences


# === SQuAD ===


@dataclass
class QAExample:
    """One SQuAD question: its context, gold answers and whether it is answerable."""

    qid: str
    question: str
    context: str
    answers: list[str] = field(default_factory=list)
    answer_start: int | None = None
    is_impossible: bool = False


def _object(value, where: str, what: str) -> dict:
    """``value`` if it is a JSON object, else one sentence naming where it is."""
    if not isinstance(value, dict):
        raise InputDataError(
            f"{where}: expected {what} as a JSON object, not {value!r:.40}; see SQuAD's layout "
            '({"data": [{"paragraphs": [{"context": ..., "qas": [...]}]}]}).'
        )
    return value


def _list(value: dict, key: str, where: str) -> list:
    """``value[key]`` (missing or null: empty) if it is a JSON list, else one sentence."""
    found = value.get(key) or []
    if not isinstance(found, list):
        raise InputDataError(
            f"{where}: '{key}' must be a JSON list, not {type(found).__name__}; see SQuAD's "
            'layout ({"data": [{"paragraphs": [{"context": ..., "qas": [...]}]}]}).'
        )
    return found


def read_squad(path: str | Path, *, require_answers: bool = True) -> list[QAExample]:
    """Read SQuAD 1.1 or 2.0 JSON (``{"data": [{"paragraphs": [{"context", "qas"}]}]}``).

    The first gold answer is the training target; its ``answer_start`` must point
    at its text in the context. ``is_impossible`` questions (2.0) have no answers.
    """
    path = Path(path)
    text = "\n".join(_open_lines(path))
    document = _json(text, path, "fix the file")
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise InputDataError(f"{path}: expected SQuAD JSON with a top-level 'data' list.")
    examples: list[QAExample] = []
    seen: dict[str, str] = {}
    for a, article in enumerate(document["data"]):
        article = _object(article, f"{path}: data[{a}]", "an article")
        for p, paragraph in enumerate(_list(article, "paragraphs", f"{path}: data[{a}]")):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            paragraph = _object(paragraph, where, "a paragraph")
            context = paragraph.get("context")
            if not isinstance(context, str) or not context.strip():
                raise InputDataError(f"{where} has no 'context' text; add it.")
            for q, qa in enumerate(_list(paragraph, "qas", where)):
                qa = _object(qa, f"{where}.qas[{q}]", "a question")
                qid = str(qa.get("id", f"{a}-{p}-{q}"))
                if qid in seen:  # answers and scores are kept per id
                    raise InputDataError(
                        f"{where}.qas[{q}]: question id '{qid}' is also {seen[qid]}'s; give "
                        "each question its own id."
                    )
                seen[qid] = f"{where}.qas[{q}]"
                question = qa.get("question")
                if not isinstance(question, str) or not question.strip():
                    raise InputDataError(f"{where}, question id '{qid}': the question is empty.")
                impossible = bool(qa.get("is_impossible", False))
                answers = _list(qa, "answers", f"{where}, question id '{qid}'")
                for answer in answers:
                    _object(answer, f"{where}, question id '{qid}': answers", "an answer")
                texts = [str(x.get("text", "")) for x in answers]
                start = None
                if answers and not impossible:
                    start = answers[0].get("answer_start")
                    text = texts[0]
                    if not text.strip():
                        raise InputDataError(
                            f"{where}, question id '{qid}': the answer's text is empty; give "
                            "the answer's words, or set is_impossible (SQuAD 2.0)."
                        )
                    found = isinstance(start, int) and context[start : start + len(text)] == text
                    if not found:
                        raise InputDataError(
                            f"{where}, question id '{qid}': answer '{texts[0][:40]}' is not at "
                            f"answer_start {start} of the context; fix answer_start."
                        )
                elif not impossible and require_answers:
                    raise InputDataError(
                        f"{where}, question id '{qid}' has no answers; add one or set "
                        "is_impossible (SQuAD 2.0)."
                    )
                examples.append(QAExample(qid, question, context, texts, start, impossible))
    if not examples:
        raise InputDataError(f"{path} has no questions; add 'qas' entries.")
    return examples
