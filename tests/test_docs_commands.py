"""Every ``keras-electra`` command in README.md and docs/ runs as written.

The commands are read from the pages' fenced shell blocks (line continuations, quotes
across lines, ``VAR=value`` prefixes and ``export`` lines followed as a shell follows
them; a page's ``--8<--`` includes are read too). Their paths are mapped onto small
fixtures this module builds (:data:`DOC_PATHS`: a tiny corpus, the records the docs' own
``prepare`` commands write, a tiny pretrained run, fine-tuned directories, an export, small
CSV/TSV/CoNLL/SQuAD files, checkpoints in the other formats); ``--output`` stays where the
command puts it, under a fresh directory per command. Then each runs in process, through
the command's own ``main``:

- ``pretrain`` and ``finetune`` with ``--dry-run`` (every input checked against the
  settings, nothing trained);
- ``prepare`` for real, first, on the tiny corpus: its records are what the ``pretrain``
  commands' dry runs read, so a command whose length or vocabulary does not match the
  docs' own ``prepare`` fails;
- the others (export, score, predict, convert, report, ``--help``) for real on the
  fixtures, ``score --server localhost:8500`` against the suite's stand-in for TF Serving.

A command that is the same as one already run but for its ``--output`` (the README and
three pages export the same run) is parsed, and the earlier run stands for it.

Skipped, each with its reason (:data:`SKIPPED`, asserted to be exactly these): commands
that need a service this machine cannot reach. A flag the command does not have, or
spelled only as an abbreviation of one it has, fails the command before it runs.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import random
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import marker_squad

from keras_electra.cli import build_parser, main, parse_arguments
from keras_electra.data.beam import beam_available, pipeline_options
from keras_electra.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs")

SHELLS = {"bash", "sh", "shell", "console"}
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)(?P<lang>[^\n`]*)\n"
    r"(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.M | re.S,
)
SNIPPET = re.compile(r'^-{2}8<-{2}\s+"([^"]+)"\s*$', re.M)
SEPARATORS = {"&&", "||", ";", "|", "&"}
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")

# How each subcommand runs here (every subcommand must be in one: a new one needs a choice).
DRY_RUN = {"pretrain", "finetune"}
FOR_REAL = {"prepare", "export", "score", "rerank", "predict", "convert", "report"}

# Commands that need a service this machine cannot reach, by a token in them.
SKIP_REASONS = {
    "hf:": "downloads from the Hugging Face Hub (tests/test_quickstart.py runs --init hf: "
    "and convert --from hf hf: against a local hub)",
    "serving.example.com": "a TLS proxy with token checks on a remote host "
    "(tests/test_serving_secure.py runs these flags against a local one)",
    "DataflowRunner": "runs on Google Cloud Dataflow (tests/test_prepare_beam.py runs the "
    "same pipeline on Beam's DirectRunner)",
}
# Exactly the commands skipped, as `page: the command's first tokens`.
SKIPPED = {
    "README.md: finetune --init hf:google/electra-small-discriminator",
    "README.md: convert --from hf hf:google/electra-small-discriminator",
    "docs/checkpoints.md: finetune --init hf:google/electra-small-discriminator",
    "docs/checkpoints.md: pretrain --init hf:google/electra-small-discriminator",
    "docs/checkpoints.md: convert --from hf hf:google/electra-small-discriminator",
    "docs/pretraining.md: prepare --corpus gs://bucket/wikipedia/ --output gs://bucket/wiki-128/ "
    "--runner DataflowRunner",
    "docs/quickstart.md: finetune --init hf:google/electra-small-discriminator",
    "serving/README.md: score --server serving.example.com:443",
    "serving/README.md: score --server https://serving.example.com",
}

# Where the docs' paths lead: a path in a command (after `gs://bucket/` and `/shared/` are
# taken off) that is, or lies under, one of these names is that fixture. The records
# directories come from the docs' own `prepare` commands (their --output's name).
DOC_PATHS = {
    "my_corpus": "corpus",
    "data/sample/shakespeare.txt": "corpus/part-1.txt",
    "held_out.txt": "held_out.txt",
    "shakespeare.txt": "corpus/part-1.txt",
    "shakespeare_valid.txt": "held_out.txt",
    "runs/mine": "run",
    "runs/demo": "run",
    "runs/small": "run",
    "runs/cls": "classifier",
    "runs/electra-small": "run",
    "runs/sweep/paper": "run",
    "runs/sweep/t2": "run",
    "RUN_DIR": "run",
    "runs/sst2": "classifier",
    "runs/squad": "squad",
    "saved_models/mine": "export",
    "saved_models/electra": "export",
    "saved_models/demo": "export",
    "saved_models/electric": "electric-export",
    "dev_nbest.jsonl": "dev_nbest.jsonl",
    "nbest.jsonl": "nbest.jsonl",
    "train.csv": "train.csv",
    "train.tsv": "train.tsv",
    "dev.tsv": "dev.tsv",
    "test.tsv": "test.tsv",
    "mnli.tsv": "mnli.tsv",
    "mnli_dev.tsv": "mnli_dev.tsv",
    "sts.tsv": "sts.tsv",
    "sts_dev.tsv": "sts_dev.tsv",
    "train.conll": "train.conll",
    "dev.conll": "dev.conll",
    "train-v2.0.json": "train-v2.0.json",
    "dev-v2.0.json": "dev-v2.0.json",
    "electra_small": "google",
    "electra-small-discriminator": "hf/discriminator",
    "electra-small-generator": "hf/generator",
    "electra_small_discriminator_uncased_en": "keras-hub",
}
REMOTE_ROOTS = ("gs://bucket/", "/shared/")
SERVER = "localhost:8500"  # TF Serving's gRPC port in the docs: the stand-in's here
REST_SERVER = "http://localhost:8501"  # its REST port
# The models the docs' servers serve, by --model-name: the export each one serves (a
# documented path; the docs' own export commands write the ones DOC_PATHS does not name).
SERVED = {
    "electra": "saved_models/electra",
    "cls": "saved_models/cls",
    "electra_classifier": "saved_models/cls",
    "electric": "saved_models/electric",
}
PATH_LIKE = re.compile(r"/|\.(txt|tsv|csv|jsonl?|conll|pem)$")
# Options whose value the command writes: left where the command puts them.
OUTPUTS = {"--output"}


# === Reading the commands ===


@dataclass
class DocCommand:
    """One ``keras-electra`` command on a page."""

    page: str
    line: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.argv[0] if self.argv and not self.argv[0].startswith("-") else "--help"

    @property
    def head(self) -> str:
        """``page: its arguments up to the first that needs a service out of reach`` (as
        :data:`SKIPPED` names a command), or the whole command."""
        end = next(
            (i for i, t in enumerate(self.argv) if any(m in t for m in SKIP_REASONS)),
            len(self.argv) - 1,
        )
        return f"{self.page}: {' '.join(self.argv[: end + 1])}"

    def __str__(self) -> str:
        prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in self.env.items())
        return f"{self.page}:{self.line}: {prefix}keras-electra {shlex.join(self.argv)}"


def page_texts(repo: Path = REPO) -> dict[str, str]:
    """README.md, every docs/ page, and the files they include (``--8<-- "FILE"``)."""
    paths = [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]
    texts = {str(p.relative_to(repo)): p.read_text(encoding="utf-8") for p in paths}
    for text in list(texts.values()):
        for included in SNIPPET.findall(text):
            texts.setdefault(included, (repo / included).read_text(encoding="utf-8"))
    return texts


def _logical_lines(body: str):
    """``(first line number, text)`` of each shell line: continuations joined, a quote
    left open carried onto the next line (as the shell reads them)."""
    buffer, start = "", None
    for number, line in enumerate(body.splitlines(), 1):
        start = number if start is None else start
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        buffer += line
        try:
            shlex.split(buffer, comments=True)
        except ValueError:  # no closing quotation: the string goes on
            buffer += "\n"
            continue
        yield start, buffer
        buffer, start = "", None
    if buffer.strip():
        raise ValueError(f"unterminated shell line: {buffer!r}")


def _tokens(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def extract_commands(markdown: str, page: str) -> list[DocCommand]:
    """Every ``keras-electra`` command in ``markdown``'s fenced shell blocks, in order."""
    commands = []
    for block in FENCE.finditer(markdown):
        if block["lang"].strip().split(" ")[0] not in SHELLS:
            continue
        indent = len(block["indent"])
        body = "\n".join(line[indent:] for line in block["body"].splitlines())
        first = markdown.count("\n", 0, block.start("body")) + 1
        exported: dict[str, str] = {}
        for number, line in _logical_lines(body):
            segment: list[str] = []
            for token in [*_tokens(line), ";"]:
                if token not in SEPARATORS:
                    segment.append(token)
                    continue
                env = {}
                while segment and ASSIGNMENT.match(segment[0]):
                    key, _, value = segment.pop(0).partition("=")
                    env[key] = value
                if segment[:1] == ["export"]:
                    exported.update(a.partition("=")[::2] for a in segment[1:])
                elif segment and Path(segment[0]).name == "keras-electra":
                    where = first + number - 1
                    commands.append(DocCommand(page, where, segment[1:], {**exported, **env}))
                segment = []
    return commands


def all_commands(repo: Path = REPO) -> list[DocCommand]:
    return [c for page, text in page_texts(repo).items() for c in extract_commands(text, page)]


def skip_reason(command: DocCommand) -> str | None:
    for marker, reason in SKIP_REASONS.items():
        if any(marker in token for token in command.argv):
            return reason
    return None


# === Running them ===


class CommandFailed(AssertionError):
    """A documented command that does not run as written."""


def _subparsers():
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a.choices, dict)).choices


def check_flags(command: DocCommand) -> None:
    """Every ``--flag`` is one the subcommand has, spelled out (argparse would take an
    abbreviation, which a renamed flag can leave valid by accident)."""
    if command.name == "--help":
        return
    parsers = _subparsers()
    if command.name not in parsers:
        raise CommandFailed(f"{command}: keras-electra has no command '{command.name}'")
    known = {s for a in parsers[command.name]._actions for s in a.option_strings}
    beam = []  # prepare's other flags are Apache Beam's pipeline options, checked by Beam
    for token in command.argv[1:]:
        flag = token.partition("=")[0]
        if flag.startswith("--") and flag not in known:
            if command.name != "prepare":
                raise CommandFailed(f"{command}: '{command.name}' has no flag {flag}")
            beam.append(flag)
    if beam and beam_available():
        try:
            pipeline_options(parse_arguments(command.argv).beam_options)
        except ConfigError as e:
            raise CommandFailed(f"{command}: {e}") from None


@dataclass
class Fixtures:
    """The files the docs' paths map onto (see :data:`DOC_PATHS`), under ``root``."""

    root: Path
    records: dict[str, Path] = field(default_factory=dict)  # prepare --output name -> dir
    exports: dict[str, Path] = field(default_factory=dict)  # export --output -> its dir
    servers: dict[str, object] = field(default_factory=dict)  # model name -> ModelServer
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    # Commands run, but for their --output: what they printed and where they wrote it.
    done: dict[tuple, tuple[str, Path | None]] = field(default_factory=dict)

    def resolve(self, token: str) -> str | None:
        """The fixture path for a documented input path, or None if it names none."""
        path = token
        for root in REMOTE_ROOTS:
            path = path.removeprefix(root)
        path = path.removeprefix("./").rstrip("/")
        table = {name: str(self.root / f) for name, f in DOC_PATHS.items()}
        table.update({name: str(d) for name, d in self.records.items()})
        table.update({name: str(d) for name, d in self.exports.items()})
        for name in sorted(table, key=len, reverse=True):
            if path == name or path.startswith(name + "/"):
                return table[name] + path[len(name) :]
        return None

    def server(self, name: str):
        """The stand-in server for the model ``name`` (:data:`SERVED`), started once."""
        from tfserving_standin import ModelServer

        if name not in SERVED:
            raise CommandFailed(f"no served model '{name}' (SERVED)")
        if name not in self.servers:
            export = self.resolve(SERVED[name])
            assert export is not None, SERVED[name]
            self.servers[name] = self.stack.enter_context(ModelServer(export, name))
        return self.servers[name]


def mapped_argv(command: DocCommand, fixtures: Fixtures) -> list[str]:
    """The command's arguments with its input paths on the fixtures and its outputs
    relative to the current directory; a path that names no fixture fails."""
    argv = []
    for i, token in enumerate(command.argv):
        if i and command.argv[i - 1] in OUTPUTS:
            for root in REMOTE_ROOTS:
                token = token.removeprefix(root)
            argv.append(token)
            continue
        if token in (SERVER, REST_SERVER):
            name = "electra"
            if "--model-name" in command.argv:
                name = command.argv[command.argv.index("--model-name") + 1]
            server = fixtures.server(name)
            argv.append(server.grpc_target if token == SERVER else server.rest_url)
            continue
        found = fixtures.resolve(token)
        if found is None and PATH_LIKE.search(token) and not token.startswith("-"):
            raise CommandFailed(f"{command}: no fixture for the path '{token}' (DOC_PATHS)")
        argv.append(found or token)
    if command.name in DRY_RUN and "--dry-run" not in argv:
        argv.append("--dry-run")
    return argv


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _key(argv: list[str]) -> tuple:
    """A command's arguments without its ``--output`` value."""
    return tuple(t for i, t in enumerate(argv) if not (i and argv[i - 1] in OUTPUTS))


def run_command(command: DocCommand, fixtures: Fixtures, workdir: Path) -> str:
    """Run one documented command in ``workdir``; return its output, or raise
    :class:`CommandFailed` with the command and its error. One the same as a command
    already run but for its ``--output`` is parsed, and the earlier one's output returned."""
    check_flags(command)
    argv = mapped_argv(command, fixtures)
    key = (_key(argv), tuple(sorted(command.env.items())))
    if key in fixtures.done and command.name in FOR_REAL:
        build_parser().parse_args(argv)
        return fixtures.done[key][0]
    out, err = io.StringIO(), io.StringIO()
    previous = Path.cwd()
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    try:
        with _environment(command.env), contextlib.redirect_stdout(out):
            with contextlib.redirect_stderr(err):
                try:
                    status = main(argv)
                except SystemExit as stop:  # argparse: --help (0) or a usage error (2)
                    status = stop.code
    finally:
        os.chdir(previous)
    if status != 0:
        raise CommandFailed(f"{command}\n  ran as: {shlex.join(argv)}\n  {err.getvalue()}")
    written = argv[argv.index("--output") + 1] if "--output" in argv else None
    fixtures.done[key] = (out.getvalue(), None if written is None else workdir / written)
    return out.getvalue()


# === The fixtures ===

COMMANDS = all_commands()


def _write_table(path: Path, header: list[str], rows: list[list[str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, delimiter="\t" if path.suffix == ".tsv" else ",")
        writer.writerows([header, *rows])


def _data_files(root: Path, words: list[str]) -> None:
    """The tables, CoNLL and SQuAD files the fine-tuning commands name, with their columns."""
    rng = random.Random(0)

    def sentence() -> str:
        return " ".join(rng.sample(words, 6))

    classes = [[sentence(), rng.choice(["pos", "neg"])] for _ in range(24)]
    for name in ("train.csv", "train.tsv", "dev.tsv", "test.tsv"):
        _write_table(root / name, ["sentence", "label"], classes)
    pairs = [[sentence(), sentence(), rng.choice(["entailment", "neutral"])] for _ in range(16)]
    for name in ("mnli.tsv", "mnli_dev.tsv"):
        _write_table(root / name, ["sentence1", "sentence2", "gold_label"], pairs)
    scores = [[sentence(), sentence(), f"{rng.uniform(0, 5):.2f}"] for _ in range(16)]
    for name in ("sts.tsv", "sts_dev.tsv"):
        _write_table(root / name, ["sentence1", "sentence2", "score"], scores)
    tagged = []
    for _ in range(12):
        tagged += [f"{w} {rng.choice(['O', 'B-PER', 'I-PER'])}" for w in rng.sample(words, 5)]
        tagged.append("")
    for name in ("train.conll", "dev.conll"):
        (root / name).write_text("\n".join(tagged) + "\n", encoding="utf-8")
    squad = json.dumps(marker_squad(words, 12, seed=1))
    for name in ("train-v2.0.json", "dev-v2.0.json"):
        (root / name).write_text(squad, encoding="utf-8")


def _other_formats(root: Path, run: Path) -> None:
    """A model of the run's sizes as the released checkpoints are (one shared embedding
    block) in the other formats: google-research TF1 (``google/``), Hugging Face (``hf/``)
    and keras-hub (``keras-hub/``), for the ``convert --from`` commands."""
    import tensorflow as tf

    from keras_electra.convert import write_hf, write_keras_hub
    from keras_electra.convert.core import read_model
    from keras_electra.pretraining.pretrainer import ElectraPretrainer
    from keras_electra.run_directory import RunDirectory

    config, tokens = RunDirectory(run).config_and_vocab()
    model = ElectraPretrainer(config.replace(embedding_sharing="all"), seed=0)
    write_hf(model, tokens, root / "hf")
    write_keras_hub(model, tokens, root / "keras-hub")
    (root / "google").mkdir()
    (root / "google" / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    arrays = read_model(model)
    with tf.Graph().as_default():
        for name, value in arrays.items():
            tf.compat.v1.get_variable(name, initializer=tf.constant(value))
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(session, str(root / "google" / "model.ckpt-1"))


def _electric(root: Path, words: list[str]) -> None:
    """A two-step Electric run of one layer on the tiny corpus, exported
    (``saved_models/electric``), and n-best lists with first-pass scores and references
    for ``rerank``."""
    from keras_electra.export import export
    from keras_electra.pretraining.run import pretrain

    run = root / "electric-run"
    pretrain([str(root / "corpus" / "part-1.txt")], run, objective="electric", steps=2,
             batch_size=8, max_seq_length=32, vocab=str(root / "run" / "vocab.txt"),
             config_overrides={"num_layers": 1}, health=False, progress=False)  # fmt: skip
    export(run, root / "electric-export")
    rng = random.Random(0)
    for name in ("dev_nbest.jsonl", "nbest.jsonl"):
        rows = []
        for i in range(4):
            reference = " ".join(rng.sample(words, 5))
            wrong = reference.rsplit(" ", 1)[0] + " " + rng.choice(words)
            hypotheses = [{"text": wrong, "score": -1.0}, {"text": reference, "score": -1.5}]
            rows.append({"id": f"u{i}", "hypotheses": hypotheses, "reference": reference})
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory, tiny_run, small_corpus):
    """Every fixture of :data:`DOC_PATHS`, then the docs' ``prepare`` commands run on the
    tiny corpus (their records recorded by output name), then the stand-in server."""
    from keras_electra.finetuning import finetune

    root = tmp_path_factory.mktemp("doc-fixtures")
    lines = small_corpus.read_text(encoding="utf-8").splitlines()
    (root / "corpus").mkdir()
    (root / "corpus" / "part-1.txt").write_text("\n".join(lines[:300]) + "\n", encoding="utf-8")
    (root / "corpus" / "part-2.txt").write_text("\n".join(lines[300:500]) + "\n", "utf-8")
    (root / "held_out.txt").write_text("\n".join(lines[500:600]) + "\n", encoding="utf-8")
    shutil.copytree(tiny_run, root / "run")  # commands write reports into it
    vocab = (root / "run" / "vocab.txt").read_text(encoding="utf-8").split("\n")
    words = [w for w in vocab if w.isalpha() and len(w) > 2]
    _data_files(root, words)
    quick = dict(epochs=1, batch_size=8, max_seq_length=32, progress=False)
    finetune(root / "run", "classify", root / "train.tsv", None, root / "classifier",
             text_column="sentence", **quick)  # fmt: skip
    finetune(root / "run", "qa", root / "train-v2.0.json", None, root / "squad", version_2=True,
             doc_stride=16, max_query_length=8, **quick)  # fmt: skip
    _other_formats(root, root / "run")
    _electric(root, words)
    found = Fixtures(root)
    # The export the score commands read: the docs' first export of the run, for real.
    first = next(c for c in COMMANDS if c.name == "export" and c.argv[2] in DOC_PATHS)
    assert DOC_PATHS[first.argv[2]] == "run", str(first)
    run_command(first, found, root / "exported")
    (root / "export").symlink_to(root / "exported" / first.argv[first.argv.index("--output") + 1])
    # The records the pretrain commands read: the docs' own prepare commands, for real
    # (but those on a service out of reach, such as Dataflow).
    for command in (c for c in COMMANDS if c.name == "prepare" and not skip_reason(c)):
        output = Path(command.argv[command.argv.index("--output") + 1]).name
        workdir = root / "prepared" / f"{command.page.replace('/', '_')}-{command.line}"
        run_command(command, found, workdir)
        key = (_key(mapped_argv(command, found)), ())
        written = found.done[key][1]
        if output in found.records:  # the same name must mean the same records
            same = (found.records[output] / "metadata.json").read_text()
            assert (written / "metadata.json").read_text() == same, (str(command), "differs")
        found.records[output] = written
    # The exports the score commands read that DOC_PATHS does not name: the docs' own
    # export commands, for real (one the same as another but for --output is not rerun).
    for command in (c for c in COMMANDS if c.name == "export"):
        output = command.argv[command.argv.index("--output") + 1].rstrip("/")
        if output in DOC_PATHS:
            continue
        workdir = root / "exports" / f"{command.page.replace('/', '_')}-{command.line}"
        run_command(command, found, workdir)
        key = (_key(mapped_argv(command, found)), tuple(sorted(command.env.items())))
        found.exports[output] = found.done[key][1]
    with found.stack:
        yield found


# === The tests ===


def test_the_pages_have_commands_and_every_subcommand_is_placed():
    names = {c.name for c in COMMANDS}
    assert {"pretrain", "prepare", "finetune", "export", "score", "convert"} <= names
    assert set(_subparsers()) <= DRY_RUN | FOR_REAL
    assert len(COMMANDS) > 50, len(COMMANDS)
    # Every line that starts a keras-electra command in any fenced block is in a shell
    # block (so it is read above).
    for page, text in page_texts().items():
        for block in FENCE.finditer(text):
            if block["lang"].strip() in SHELLS:
                continue
            starts = [ln for ln in block["body"].splitlines() if ln.strip().startswith("keras-")]
            assert not starts, (page, starts)


def test_exactly_the_listed_commands_are_skipped():
    skipped = {c.head for c in COMMANDS if skip_reason(c)}
    assert skipped == SKIPPED


@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.page}:{c.line}" for c in COMMANDS])
def test_the_documented_command_runs(command, fixtures, tmp_path):
    reason = skip_reason(command)
    if reason:
        pytest.skip(reason)
    if command.name == "prepare":
        return  # run (for real) by the fixture, whose records the pretrain commands read
    output = run_command(command, fixtures, tmp_path)
    if command.name in DRY_RUN:
        assert output.startswith("Dry run: every input checked"), output


def test_every_readme_pretrain_command_on_records_passes_against_the_docs_prepare(fixtures):
    """The one-GPU, several-GPU, several-machine and TPU commands read TFRecords; each
    must name a directory the docs' own prepare wrote, at the length its preset takes."""
    on_records = [
        c
        for c in COMMANDS
        if c.page == "README.md" and c.name == "pretrain" and "--vocab" in c.argv
    ]
    assert len(on_records) >= 4, [str(c) for c in on_records]
    for command in on_records:
        corpus = command.argv[command.argv.index("--corpus") + 1]
        assert Path(corpus.rstrip("/")).name in fixtures.records, str(command)


# === The extractor and runner themselves ===

SYNTHETIC = """\
Some text.

```bash
# a comment line
KERAS_ELECTRA_KERNELS=reference keras-electra pretrain --preset tiny \\
    --corpus my_corpus/ --output runs/x   # trailing comment
export TF_CONFIG='{"cluster": {"worker": ["a:1", "b:2"]},
                   "task": {"type": "worker", "index": 0}}'
keras-electra report runs/mine && echo done
```

```python
keras-electra = "not a command"
```
"""


def test_the_extractor_follows_continuations_quotes_env_and_exports():
    first, second = extract_commands(SYNTHETIC, "page.md")
    assert first.argv == ["pretrain", "--preset", "tiny", "--corpus", "my_corpus/", "--output",
                          "runs/x"]  # fmt: skip
    assert first.env == {"KERAS_ELECTRA_KERNELS": "reference"} and first.line == 5
    assert second.argv == ["report", "runs/mine"] and second.line == 9
    assert '"index": 0' in second.env["TF_CONFIG"]


def test_a_renamed_flag_in_a_copy_of_the_readme_fails(fixtures, tmp_path):
    """The README's first pretrain command with its last flag renamed, and shortened to an
    abbreviation argparse would accept: the drift this test exists to catch."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    quickstart = next(c for c in extract_commands(readme, "README.md") if c.name == "pretrain")
    run_command(quickstart, fixtures, tmp_path / "as-written")  # passes as written
    flag = [t for t in quickstart.argv if t.startswith("--")][-1]
    for renamed in (flag + "-renamed", flag[:-2]):
        copy = readme.replace(f"{flag} ", f"{renamed} ")
        changed = next(c for c in extract_commands(copy, "README.md") if c.line == quickstart.line)
        assert renamed in changed.argv
        with pytest.raises(CommandFailed, match=f"has no flag {renamed}$"):
            run_command(changed, fixtures, tmp_path / renamed)
    # A value the parser refuses reaches the runner's error too.
    wrong = DocCommand("page.md", 1, ["pretrain", "--corpus", "my_corpus/", "--steps", "x",
                                      "--output", "runs/x"])  # fmt: skip
    with pytest.raises(CommandFailed, match="invalid int value"):
        run_command(wrong, fixtures, tmp_path / "wrong")
