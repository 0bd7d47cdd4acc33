"""Corpus preparation against a Hugging Face ``tokenizers`` peer, side by side in one run.

Measures, on one corpus, one vocabulary (``--vocab-size`` pieces, uncased) and one length:

- ``prepare`` to TFRecords (MB of text per second): the in-process writer, and the Beam
  pipeline on the DirectRunner with 1 and with N workers (the scaling factor is their
  ratio), each checked to write the same bytes;
- the peer: ``tokenizers``' ``BertWordPieceTokenizer`` with the same vocabulary,
  ``encode_batch`` on all cores (Rust), the same packing rule in Python and
  ``tf.train.Example`` records written with TensorFlow, at its best batch size;
- vocabulary learning: ``learn_vocab`` (in process, and with the Beam word count) against
  ``tokenizers``' WordPiece trainer on all cores.

Writes one JSON object (with the CPU model) to ``benchmarks/results/`` and prints it.
Pause other work on the machine first; every side runs in this one process tree.

Usage:
    python benchmarks/prepare_throughput.py --corpus FILES... [--mb 20] [--workers 2]
"""

from __future__ import annotations

import argparse
import datetime
import filecmp
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from machine_info import cpu_model  # noqa: E402


def peer_prepare(corpus: str, vocab_file: str, out: str, length: int, batch_lines: int) -> int:
    """The peer: HF tokenizers (all cores) + ELECTRA's packing rule in Python +
    tf.train.Example records. Returns the number of examples."""
    import tensorflow as tf
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(vocab_file, lowercase=True)
    vocab = tokenizer.get_vocab()
    cls, sep, pad = vocab["[CLS]"], vocab["[SEP]"], vocab["[PAD]"]
    rng = random.Random(0)
    os.makedirs(out, exist_ok=True)
    writer = tf.io.TFRecordWriter(os.path.join(out, "peer.tfrecord"))
    count = 0

    def write(first: list[int], second: list[int]) -> None:
        nonlocal count
        first = first[: length - 2]
        second = second[: max(0, length - len(first) - 3)]
        ids = [cls, *first, sep] + ([*second, sep] if second else [])
        segments = [0] * (len(first) + 2) + [1] * (len(ids) - len(first) - 2)
        mask = [1] * len(ids) + [0] * (length - len(ids))
        ids += [pad] * (length - len(ids))
        segments += [0] * (length - len(segments))
        feature = {
            "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
            "input_mask": tf.train.Feature(int64_list=tf.train.Int64List(value=mask)),
            "segment_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=segments)),
        }
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        writer.write(example.SerializeToString())
        count += 1

    first: list[int] = []
    second: list[int] = []
    target, first_target = length, (length - 3) // 2

    def new_targets() -> tuple[int, int]:
        t = rng.randint(5, length) if rng.random() < 0.05 else length
        return t, (1 << 30 if rng.random() < 0.1 else (t - 3) // 2)

    with open(corpus, encoding="utf-8", errors="replace") as f:
        while True:
            lines = [line.rstrip("\n") for _, line in zip(range(batch_lines), f, strict=False)]
            if not lines:
                break
            encodings = tokenizer.encode_batch(lines, add_special_tokens=False)
            for line, encoding in zip(lines, encodings, strict=True):
                ids = encoding.ids
                if not line.strip():
                    if first:
                        write(first, second)
                        first, second = [], []
                        target, first_target = new_targets()
                    continue
                if not ids:
                    continue
                if (
                    not first
                    or len(first) + len(ids) < first_target
                    or (not second and len(first) < first_target and rng.random() < 0.5)
                ):
                    first += ids
                else:
                    second += ids
                if len(first) + len(second) >= target:
                    write(first, second)
                    first, second = [], []
                    target, first_target = new_targets()
    if first:
        write(first, second)
    writer.close()
    return count


def peer_vocab(corpus: str, vocab_size: int, out: str) -> int:
    from tokenizers import BertWordPieceTokenizer

    tokenizer = BertWordPieceTokenizer(lowercase=True)
    tokenizer.train(
        [corpus],
        vocab_size=vocab_size,
        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        show_progress=False,
    )
    tokenizer.save_model(out, "peer")
    return tokenizer.get_vocab_size()


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    value = function(*args, **kwargs)
    return time.perf_counter() - start, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", nargs="+", required=True, help="text files, concatenated")
    parser.add_argument("--mb", type=float, default=20.0, help="MB of the corpus to use")
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--num-shards", type=int, default=8)
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=1, help="runs of each side (best kept)")
    parser.add_argument(
        "--scaling-mb",
        type=float,
        default=0,
        help="also time the in-process writer and Beam with 1 and N workers on the corpus "
        "repeated to this many MB (the pipeline's start-up cost amortized)",
    )
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results"))
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)

    import tensorflow as tf  # noqa: F401 (loaded before any timing)

    from keras_electra.data import ElectraTokenizer, learn_vocab, load_vocab, save_vocab
    from keras_electra.data.beam import count_words_beam, write_tfrecords_beam
    from keras_electra.data.tfrecords import write_pretraining_tfrecords
    from keras_electra.data.vocab import vocab_from_counts

    work = Path(tempfile.mkdtemp(prefix="prepare-bench-"))
    corpus = work / "corpus.txt"
    with open(corpus, "wb") as out:
        left = int(args.mb * 1e6)
        for name in args.corpus:
            with open(name, "rb") as f:
                data = f.read(left)
            cut = data.rfind(b"\n") + 1 if len(data) == left else len(data)
            out.write(data[:cut] + (b"" if data[:cut].endswith(b"\n") else b"\n"))
            left -= cut
            if left <= 0:
                break
    megabytes = corpus.stat().st_size / 1e6
    best = {}

    def run(name, function, *a, **k):
        times = []
        value = None
        for _ in range(args.repeats):
            seconds, value = timed(function, *a, **k)
            times.append(seconds)
        best[name] = min(times)
        print(f"{name}: {best[name]:.2f} s", file=sys.stderr)
        return value

    # Vocabulary learning: ours (in process) and the peer's trainer.
    tokens = run("vocab_ours", learn_vocab, [str(corpus)], args.vocab_size)

    def vocab_beam(workers: int) -> list[str]:
        counts = count_words_beam([str(corpus)], temp_dir=str(work / "counts"), num_workers=workers)
        return vocab_from_counts(counts, args.vocab_size)

    beam_tokens = run(f"vocab_beam_{args.workers}", vocab_beam, args.workers)
    run("vocab_peer", peer_vocab, str(corpus), args.vocab_size, str(work))
    vocab_file = work / "vocab.txt"
    save_vocab(tokens, str(vocab_file))
    tokenizer = ElectraTokenizer(load_vocab(str(vocab_file)))
    settings = {"max_seq_length": args.max_seq_length, "num_shards": args.num_shards, "seed": 0}

    def fresh(name: str) -> str:
        path = work / name
        shutil.rmtree(path, ignore_errors=True)
        return str(path)

    def ours_in_process(text: Path = corpus):
        return write_pretraining_tfrecords(
            str(text), tokenizer, fresh("in_process"), progress=False, **settings
        )

    def ours_beam(workers: int, text: Path = corpus):
        return write_tfrecords_beam(
            str(text),
            tokenizer,
            fresh(f"beam_{workers}"),
            num_workers=workers,
            progress=False,
            **settings,
        )

    shards = run("prepare_in_process", ours_in_process)
    beam_1 = run("prepare_beam_1", ours_beam, 1)
    beam_n = run(f"prepare_beam_{args.workers}", ours_beam, args.workers)
    identical = all(
        filecmp.cmp(a, b, shallow=False) and filecmp.cmp(a, c, shallow=False)
        for a, b, c in zip(shards, beam_1, beam_n, strict=True)
    )
    peer_batches = {}
    for lines in (1000, 10000, 100000):
        name = f"prepare_peer_batch_{lines}"
        peer_out = fresh("peer")
        run(name, peer_prepare, str(corpus), str(vocab_file), peer_out, args.max_seq_length, lines)
        peer_batches[lines] = best[name]
    peer_best = min(peer_batches.values())
    scaling = {}
    if args.scaling_mb:
        big = work / "repeated.txt"
        data = corpus.read_bytes()
        with open(big, "wb") as f:
            for _ in range(max(1, round(args.scaling_mb / megabytes))):
                f.write(data + b"\n")
        size = big.stat().st_size / 1e6
        for name, call in (
            ("in_process", lambda: ours_in_process(big)),
            ("beam_1", lambda: ours_beam(1, big)),
            (f"beam_{args.workers}", lambda: ours_beam(args.workers, big)),
        ):
            seconds, _ = timed(call)
            print(f"scaling {name}: {seconds:.2f} s", file=sys.stderr)
            scaling[name] = {"seconds": round(seconds, 3), "mb_per_s": round(size / seconds, 3)}
        scaling["corpus_mb"] = round(size, 3)
        scaling["beam_scaling"] = round(
            scaling["beam_1"]["seconds"] / scaling[f"beam_{args.workers}"]["seconds"], 3
        )
    rate = {k: round(megabytes / v, 3) for k, v in best.items() if k.startswith("prepare")}
    ours_best = max(rate["prepare_in_process"], rate[f"prepare_beam_{args.workers}"])
    result = {
        "benchmark": "prepare_throughput",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "corpus_mb": round(megabytes, 3),
        "vocab_size": len(tokens),
        "max_seq_length": args.max_seq_length,
        "num_shards": args.num_shards,
        "seconds": {k: round(v, 3) for k, v in best.items()},
        "mb_per_s": rate,
        "peer_mb_per_s_best": round(megabytes / peer_best, 3),
        "ours_over_peer": round(ours_best / (megabytes / peer_best), 3),
        "beam_scaling": round(best["prepare_beam_1"] / best[f"prepare_beam_{args.workers}"], 3),
        "beam_workers": args.workers,
        "vocab_speed_over_peer": round(best["vocab_peer"] / best["vocab_ours"], 3),
        "vocab_beam_speed_over_peer": round(
            best["vocab_peer"] / best[f"vocab_beam_{args.workers}"], 3
        ),
        "vocab_beam_same_as_in_process": beam_tokens == tokens,
        "identical_outputs": identical,
        "large_corpus": scaling,
        "repeats": args.repeats,
    }
    os.makedirs(args.output, exist_ok=True)
    day = datetime.date.today().isoformat()
    path = Path(args.output) / f"prepare_throughput_{day}{args.tag}.json"
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
