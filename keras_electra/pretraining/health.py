"""Run health: what a pretraining run's representations and detector are doing.

A run whose discriminator has collapsed still shows a falling total loss. The
measurements here (per-layer token cosines, effective rank, embedding cosine, the
probe's logit spread and identity R², ``context_auc`` and ``rarity_auc``; each is
defined in docs/run-health.md) are taken every logging window on a fixed probe (the
same token batches, masks, samples and corruptions every time), in inference mode,
and logged beside the training metrics. ``[CLS]``, ``[SEP]`` and padding are left
out of every statistic: they are never replaced and their vectors and logits are
outliers.

:func:`collapse_warnings` reads a run's metrics records and says when and how its
discriminator stopped working; ``pretrain`` prints it during the run and
``keras-electra report`` draws it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import tensorflow as tf

from keras_electra.layers.embedding import TABLES
from keras_electra.pretraining import masking

PROBE_SEED = 1234
TOP_TOKENS = 200
CORRUPTION_RATE = 0.15

# Collapse warning rules (see collapse_warnings): each must hold for WINDOWS windows in a
# row, so a state a run passes through (an energy head that starts at zero) raises none.
DEAD_AUC = 0.6
WINDOWS = 3
FLAT_LOGIT_STD = 0.02
COLLAPSED_COSINE = 0.9


class HealthProbe:
    """Fixed probe batches and the health measurements of a pretrainer on them.

    Args:
        model: the :class:`~keras_electra.pretraining.ElectraPretrainer`.
        batch: a dict of int ``[N, L]`` arrays ``token_ids``, ``padding_mask``,
            ``segment_ids`` (held-back text; 32-64 sequences are plenty).
        seed: seed of the probe's masks, samples and corruptions.

    Examples:
        >>> import numpy as np
        >>> from keras_electra.pretraining import ElectraPretrainer
        >>> model = ElectraPretrainer.from_preset("tiny", vocab_size=64, seed=0)
        >>> ids = np.random.default_rng(0).integers(5, 64, (4, 16)).astype("int32")
        >>> probe = HealthProbe(model, {"token_ids": ids, "padding_mask": np.ones_like(ids),
        ...                             "segment_ids": np.zeros_like(ids)})
        >>> sorted(probe.measure())[:3]
        ['context_auc', 'disc_cosine_0', 'disc_cosine_1']
    """

    def __init__(self, model, batch: Mapping[str, np.ndarray], seed: int = PROBE_SEED):
        c = model.config
        self.model = model
        # One graph for all the probe's forward passes (traced on the first measure): eager
        # layer calls would cost more than the arithmetic.
        self._forward = tf.function(self._forward_pass, autograph=False)
        self.ids = np.asarray(batch["token_ids"], np.int32)
        self.mask = np.asarray(batch["padding_mask"], np.int32)
        self.segments = np.asarray(batch["segment_ids"], np.int32)
        special = (c.pad_token_id, c.cls_token_id, c.sep_token_id, c.mask_token_id)
        self.ordinary = (self.mask == 1) & ~np.isin(self.ids, special)
        if not self.ordinary.any():
            raise ValueError("The health probe needs text with ordinary tokens.")
        rng = np.random.default_rng(seed)

        # The most frequent tokens of the probe text, for the embedding cosine.
        tokens, counts = np.unique(self.ids[self.ordinary], return_counts=True)
        self.top_tokens = tokens[np.argsort(-counts, kind="stable")[:TOP_TOKENS]]

        # Fixed corruptions: unigram draws (context only) and uniform draws (rarity).
        chosen = self.ordinary & (rng.random(self.ids.shape) < CORRUPTION_RATE)
        unigram = rng.choice(tokens, size=int(chosen.sum()), p=counts / counts.sum())
        ordinary_ids = np.setdiff1d(np.arange(c.vocab_size), special)
        uniform = rng.choice(ordinary_ids, size=int(chosen.sum()))
        self.corrupted = {}
        for name, draws in (("context", unigram), ("rarity", uniform)):
            fake = self.ids.copy()
            fake[chosen] = draws
            self.corrupted[name] = fake

        # Fixed masks and sampling seed for the generator's own corruption.
        if model.generator is not None:
            self.masked = masking.mask_tokens(
                self.ids,
                self.mask,
                special_ids=(c.pad_token_id, c.cls_token_id, c.sep_token_id),
                mask_token_id=c.mask_token_id,
                mask_prob=c.mask_prob,
                mask_token_prob=c.mask_token_prob,
                max_predictions=c.max_predictions(self.ids.shape[1]),
                seeds=(tf.constant([seed, 1]), tf.constant([seed, 2])),
            )
            self.sample_seed = tf.constant([seed, 3])

    def measure(self) -> dict[str, float]:
        """Every health metric of the model's current weights (inference mode)."""
        tensors = {k: v.numpy() for k, v in self._forward().items()}
        out: dict[str, float] = {}
        layers = sorted(k for k in tensors if k.startswith("hidden_"))
        for i, name in enumerate(layers):
            out[f"disc_cosine_{i}"] = mean_pairwise_cosine(tensors[name][self.ordinary])
        out["disc_effective_rank"] = effective_rank(tensors[layers[-1]][self.ordinary])
        table = self.model.embedding_tables("discriminator")[TABLES[0]]
        out["embedding_cosine"] = mean_pairwise_cosine(table[self.top_tokens])
        for name, fake in self.corrupted.items():
            if f"{name}_logits" in tensors:
                logits = tensors[f"{name}_logits"][self.ordinary]
                out[f"{name}_auc"] = auc((fake != self.ids)[self.ordinary], logits)
        if "own_logits" in tensors:
            fake = tensors["own_ids"]
            logits = tensors["own_logits"][self.ordinary]
            out["probe_logit_std"] = float(logits.std())
            # sigmoid via tanh: no overflow warning for logits far below zero
            out["probe_mean_prob"] = float((0.5 + 0.5 * np.tanh(0.5 * logits)).mean())
            replaced = (fake != self.ids)[self.ordinary]
            out["probe_replaced_fraction"] = float(replaced.mean())
            if 0 < replaced.sum() < replaced.size:
                # The head's own task on held-out text; for Electric, whether the energy
                # rises on a token its cloze model changed (its disc_auc is of the NCE
                # logit, which adds log q and can sit below 0.5: docs/run-health.md).
                out["probe_auc"] = auc(replaced, logits)
            out["probe_identity_r2"] = identity_r2(fake[self.ordinary], logits)
        return {k: round(v, 5) for k, v in out.items()}

    def _inputs(self, token_ids) -> dict:
        return {"token_ids": token_ids, "segment_ids": self.segments, "padding_mask": self.mask}

    def _forward_pass(self) -> dict[str, tf.Tensor]:
        model, head = self.model, self.model.token_head
        out = {}
        token_ids = self.ids
        if model.generator is not None and head is not None:
            # The representation is measured on what the discriminator trains on.
            token_ids = out["own_ids"] = self._generator_corruption()
        states = hidden_states(model.discriminator, self._inputs(token_ids))
        out.update({f"hidden_{i:03d}": h for i, h in enumerate(states)})
        if head is None:
            return out
        if "own_ids" in out:
            out["own_logits"] = head(states[-1])
        for name, fake in self.corrupted.items():
            out[f"{name}_logits"] = head(model.discriminator(self._inputs(fake), training=False))
        return out

    def _generator_corruption(self) -> tf.Tensor:
        model, masked = self.model, self.masked
        # A masked LM reads the masked text; Electric's cloze model the original.
        reads = (
            masked.token_ids if getattr(model.generator, "reads_masked_text", True) else self.ids
        )
        hidden = model.generator(self._inputs(reads), training=False)
        logits = model.generator_head(hidden, masked.positions)
        # As the objective samples (ELECTRA at its temperature, Electric from q itself).
        sampled = masking.sample_tokens(
            logits, masked.labels, seed=self.sample_seed, **model.sampling
        )
        return masking.replace_tokens(self.ids, masked.positions, sampled, masked.weights)


def hidden_states(backbone, inputs: dict) -> list[tf.Tensor]:
    """The embedding block's output and each transformer layer's output (inference)."""
    x = backbone.embedding(inputs["token_ids"], inputs["segment_ids"], training=False)
    states = [x]
    encoder = backbone.encoder
    if encoder.projection is not None:
        x = encoder.projection(x)
    for layer in encoder.transformer_layers:
        x = layer(x, padding_mask=inputs["padding_mask"], training=False)
        states.append(x)
    if encoder.final_layer_norm is not None:  # pre-LayerNorm towers: the output is normalized
        states[-1] = encoder.final_layer_norm(x)
    return states


def mean_pairwise_cosine(vectors: np.ndarray) -> float:
    """Mean cosine similarity over all pairs of distinct rows, in O(n d)."""
    v = np.asarray(vectors, np.float64)
    n = len(v)
    if n < 2:
        return float("nan")
    unit = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    total = unit.sum(axis=0)
    return float((total @ total - n) / (n * (n - 1)))


def effective_rank(vectors: np.ndarray) -> float:
    """exp(entropy) of the normalized singular values of the centred rows (Roy, Vetterli 2007)."""
    v = np.asarray(vectors, np.float64)
    s = np.linalg.svd(v - v.mean(axis=0), compute_uv=False)
    p = s / max(s.sum(), 1e-12)
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def identity_r2(token_ids: np.ndarray, scores: np.ndarray) -> float:
    """Fraction of the scores' variance explained by token identity (eta squared).

    Only tokens that occur at least twice count: a token seen once would explain
    its own score and inflate the figure.
    """
    ids, inverse, counts = np.unique(token_ids, return_inverse=True, return_counts=True)
    keep = counts[inverse] >= 2
    if keep.sum() < 3:
        return float("nan")
    scores, inverse = np.asarray(scores, np.float64)[keep], inverse[keep]
    total = ((scores - scores.mean()) ** 2).sum()
    if total == 0:
        return 0.0
    sums = np.bincount(inverse, weights=scores, minlength=len(ids))
    n = np.bincount(inverse, minlength=len(ids))
    means = np.divide(sums, n, out=np.zeros_like(sums), where=n > 0)
    between = (n * (means - scores.mean()) ** 2).sum()
    return float(between / total)


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney U), ties counted as one half."""
    labels = np.asarray(labels, bool)
    positives, negatives = labels.sum(), (~labels).sum()
    if positives == 0 or negatives == 0:
        return float("nan")
    u = average_ranks(scores)[labels].sum() - positives * (positives + 1) / 2.0
    return float(u / (positives * negatives))


def average_ranks(values) -> np.ndarray:
    """1-based ranks of ``values``, tied values sharing their mean rank (each NaN its own).

    Examples:
        >>> average_ranks([3.0, 1.0, 3.0]).tolist()
        [2.5, 1.0, 2.5]
    """
    values = np.asarray(values, np.float64)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True, equal_nan=False)
    return (np.cumsum(counts) - (counts - 1) / 2.0)[inverse.reshape(-1)]


def collapse_warnings(
    records: Iterable[Mapping[str, float]], *, temperature: bool = True
) -> list[dict]:
    """The collapse warnings a run's metrics records raise, in step order; the remedies
    they name include ``--temperature`` where the run's objective samples at one
    (``temperature``: ELECTRA does, Electric samples from its cloze model as it is).

    Two rules, each reported once, at the step it first holds:

    - *dead detector*: ``disc_recall`` is 0 and ``disc_auc`` below 0.6 in three
      windows in a row (the discriminator predicts the base rate everywhere), after its
      AUC had reached 0.6 or, for one that never began, after the warm-up (the learning
      rate past its peak): every run starts there;
    - *collapsed representation*: ``probe_logit_std`` below 0.02 while the final
      layer's ``disc_cosine`` is above 0.9, in three windows in a row (every token has
      one vector; an Electric run passes through it in its first window, as its energy
      head starts at zero).

    Returns:
        A list of ``{"step", "since", "kind", "message"}`` dicts.
    """
    hotter = ["a higher --temperature"] if temperature else []

    state = {"risen": False, "peak": None}  # the AUC reached DEAD_AUC; the highest rate

    def dead(record):
        recall, value = record.get("disc_recall"), record.get("disc_auc")
        rate, peak = record.get("learning_rate"), state["peak"]
        warming = rate is not None and (peak is None or rate >= peak)  # still climbing
        state["peak"] = rate if rate is not None and (peak is None or rate > peak) else peak
        if value is not None and value >= DEAD_AUC:
            state["risen"] = True
        flat = recall is not None and value is not None and recall == 0 and value < DEAD_AUC
        return flat and (state["risen"] or not warming)

    def dead_message(since, record, windows):
        seen = f"recall 0, AUC {record['disc_auc']:.2f} for {windows} windows"
        verdict = (
            f"The discriminator stopped detecting replacements at step {since} ({seen})"
            if state["risen"]
            else "The discriminator has not begun detecting replacements after its warm-up "
            f"(from step {since}, {seen})"
        )
        remedies = ["a lower --learning-rate", *hotter, "a smaller --generator-size (a new run)"]
        return f"{verdict}: it predicts the base rate everywhere; try {_either(remedies)}."

    def collapsed(record):
        std = record.get("probe_logit_std")
        return (
            std is not None
            and std < FLAT_LOGIT_STD
            and (_final_cosine(record) or 0.0) > COLLAPSED_COSINE
        )

    rules = {
        "dead_detector": (dead, dead_message),
        "collapsed_representation": (
            collapsed,
            lambda since, record, windows: (
                f"The discriminator's token vectors collapsed at step {since} "
                f"(final-layer cosine {_final_cosine(record):.2f}, logit spread "
                f"{record['probe_logit_std']:.3f} for {windows} windows): every token looks "
                f"the same to it; try {_either(['a lower --learning-rate', *hotter])}."
            ),
        ),
    }
    warnings: list[dict] = []
    streaks: dict[str, list[int]] = {kind: [] for kind in rules}
    for record in records:
        step, seen = int(record.get("step", 0)), {w["kind"] for w in warnings}
        for kind, (holds, message) in rules.items():
            streaks[kind] = streaks[kind] + [step] if holds(record) else []
            streak = streaks[kind]
            if len(streak) >= WINDOWS and kind not in seen:
                text = message(streak[0], record, len(streak))
                warnings.append(dict(step=step, since=streak[0], kind=kind, message=text))
    return warnings


def _either(options: list[str]) -> str:
    """``a, b or c``."""
    return " or ".join([", ".join(options[:-1]), options[-1]] if len(options) > 1 else options)


def _final_cosine(record: Mapping[str, float]) -> float | None:
    layers = [int(k.rsplit("_", 1)[1]) for k in record if k.startswith("disc_cosine_")]
    if not layers:
        return None
    value = record[f"disc_cosine_{max(layers)}"]
    return None if value is None or math.isnan(value) else value
