"""Frozen-feature probes: what a pretrained model's features carry before fine-tuning.

For the ELECTRA-vs-MLM benchmark (``electra_vs_mlm.py``). A probe fits a logistic
regression on fixed vectors of the labelled training texts (its L2 strength chosen on
the validation split) and reports its test accuracy. The vectors are:

- ``pooled``: the mean of the discriminator's last hidden states over a text's tokens
  (padding excluded), the features fine-tuning starts from;
- ``bag``: the mean of the model's word-embedding rows over the text's word pieces,
  what the embedding table alone knows;
- ``tfidf``: no vectors at all: TF-IDF of the labelled texts' words and word pairs, the
  strongest thing a user with no pretraining and no network can fit;
- ``anchor``: the mean of count-based word vectors learned from the same pretraining
  corpus (positive PMI over a +-5 word-piece window with context smoothing 0.75, then a
  truncated SVD at the model's embedding width; Levy, Goldberg & Dagan 2015), what the
  corpus's word statistics give with no network at all.

Examples:
    >>> import numpy as np
    >>> x = np.array([[0.0], [0.1], [1.0], [1.1]])
    >>> y = ["a", "a", "b", "b"]
    >>> probe_accuracy(x, y, x, y, x, y)["accuracy"]
    1.0
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

REGULARIZATION = (0.01, 0.1, 1.0, 10.0, 100.0)  # the C values tried on the validation split
WINDOW = 5
CONTEXT_SMOOTHING = 0.75


def probe_accuracy(
    train_x: np.ndarray,
    train_y: Sequence[str],
    valid_x: np.ndarray,
    valid_y: Sequence[str],
    test_x: np.ndarray,
    test_y: Sequence[str],
) -> dict:
    """Test accuracy of a logistic regression on standardized features, its ``C``
    (inverse L2 strength) the best of :data:`REGULARIZATION` on the validation split."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(train_x)
    train_x, valid_x, test_x = (scaler.transform(x) for x in (train_x, valid_x, test_x))
    best: tuple[float, float, LogisticRegression] | None = None
    for c in REGULARIZATION:
        model = LogisticRegression(C=c, max_iter=2000).fit(train_x, train_y)
        score = float(np.mean(model.predict(valid_x) == np.asarray(valid_y)))
        if best is None or score > best[0]:
            best = (score, c, model)
    score, c, model = best
    accuracy = float(np.mean(model.predict(test_x) == np.asarray(test_y)))
    return {"accuracy": round(accuracy, 4), "valid_accuracy": round(score, 4), "C": c}


def tfidf_accuracy(
    train_texts: Sequence[str],
    train_y: Sequence[str],
    valid: Sequence[tuple[str, str]],
    test: Sequence[tuple[str, str]],
) -> dict:
    """The corpus-free anchor: a logistic regression on TF-IDF vectors (words and word
    pairs, sublinear counts, fitted on the labelled texts alone), ``C`` chosen on the
    validation split as :func:`probe_accuracy` does."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit(train_texts)
    train_x = vectorizer.transform(train_texts)
    valid_x, test_x = (vectorizer.transform([t for t, _ in split]) for split in (valid, test))
    valid_y, test_y = np.asarray([y for _, y in valid]), np.asarray([y for _, y in test])
    best: tuple[float, float, LogisticRegression] | None = None
    for c in REGULARIZATION:
        model = LogisticRegression(C=c, max_iter=2000).fit(train_x, list(train_y))
        score = float(np.mean(model.predict(valid_x) == valid_y))
        if best is None or score > best[0]:
            best = (score, c, model)
    score, c, model = best
    accuracy = float(np.mean(model.predict(test_x) == test_y))
    return {"accuracy": round(accuracy, 4), "valid_accuracy": round(score, 4), "C": c}


def encode(tokenizer, texts: Sequence[str], max_length: int) -> dict[str, np.ndarray]:
    """The model inputs of ``texts`` (as fine-tuning encodes them)."""
    import tensorflow as tf

    from keras_electra.encoding import encode_texts

    inputs = encode_texts(tokenizer, tf.constant(list(texts)), max_length=max_length)
    return {k: v.numpy() for k, v in inputs.items()}


def mean_rows(table: np.ndarray, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The mean of ``table``'s rows over each text's word pieces ([CLS]/[SEP]/padding
    excluded)."""
    ids, mask = inputs["token_ids"], inputs["padding_mask"].astype(bool).copy()
    mask[:, 0] = False  # [CLS]
    mask[np.arange(len(ids)), mask.sum(axis=1)] = False  # [SEP], the last real token
    counts = np.maximum(mask.sum(axis=1, keepdims=True), 1)
    return (table[ids] * mask[..., None]).sum(axis=1) / counts


def model_features(
    source: str | Path, splits: dict[str, Sequence[str]], max_length: int, batch_size: int = 128
) -> dict[str, dict[str, np.ndarray]]:
    """``pooled`` and ``bag`` vectors of each split's texts under a source directory's
    discriminator (a pretraining run, or the random-init directory of ``none``)."""
    from keras_electra.finetuning.source import load_backbone

    backbone, tokenizer, _ = load_backbone(source)
    table = np.asarray(backbone.embedding.token_embedding.embeddings, dtype=np.float32)
    features: dict[str, dict[str, np.ndarray]] = {"pooled": {}, "bag": {}}
    for split, texts in splits.items():
        inputs = encode(tokenizer, texts, max_length)
        pooled = []
        for start in range(0, len(texts), batch_size):
            batch = {k: v[start : start + batch_size] for k, v in inputs.items()}
            hidden = np.asarray(backbone(batch, training=False), dtype=np.float32)
            mask = batch["padding_mask"][..., None].astype(np.float32)
            pooled.append((hidden * mask).sum(axis=1) / mask.sum(axis=1))
        features["pooled"][split] = np.concatenate(pooled)
        features["bag"][split] = mean_rows(table, inputs)
    return features


def ppmi_svd_vectors(corpus: Sequence[str | Path], tokenizer, dim: int) -> np.ndarray:
    """Count-based word-piece vectors ``[vocab, dim]`` of a corpus (one sentence per line):
    co-occurrences within :data:`WINDOW` pieces on a line, positive PMI with context
    smoothing, truncated SVD, ``U * sqrt(S)``. A few seconds for a few MB of text."""
    from scipy.sparse import coo_matrix, csr_matrix
    from scipy.sparse.linalg import svds

    lines = []
    for path in corpus:
        with open(path, encoding="utf-8") as f:
            lines.extend(line.strip() for line in f if line.strip())
    vocab = tokenizer.vocab_size
    rows, cols = [], []
    for start in range(0, len(lines), 20000):
        pieces = tokenizer.tokenize(lines[start : start + 20000])
        ids, splits = pieces.flat_values.numpy(), pieces.row_splits.numpy()
        line_of = np.repeat(np.arange(len(splits) - 1), np.diff(splits))
        for offset in range(1, WINDOW + 1):
            same = line_of[offset:] == line_of[:-offset]
            rows += [ids[:-offset][same], ids[offset:][same]]
            cols += [ids[offset:][same], ids[:-offset][same]]
    rows_a, cols_a = np.concatenate(rows), np.concatenate(cols)
    counts = coo_matrix(
        (np.ones(len(rows_a), np.float64), (rows_a, cols_a)), shape=(vocab, vocab)
    ).tocsr()
    counts.sum_duplicates()
    word = np.asarray(counts.sum(axis=1)).ravel()
    context = np.asarray(counts.sum(axis=0)).ravel() ** CONTEXT_SMOOTHING
    context_total = context.sum()
    coo = counts.tocoo()
    # PMI(w, c) = log(P(w, c) / (P(w) P_a(c))), P(w, c) = n / total, P(w) = word / total,
    # P_a(c) = context / context_total.
    pmi = (
        np.log(coo.data) + np.log(context_total) - np.log(word[coo.row]) - np.log(context[coo.col])
    )
    keep = pmi > 0
    ppmi = csr_matrix((pmi[keep], (coo.row[keep], coo.col[keep])), shape=(vocab, vocab))
    k = min(dim, vocab - 2)
    u, s, _ = svds(ppmi, k=k, random_state=0)
    return (u * np.sqrt(s)).astype(np.float32)
