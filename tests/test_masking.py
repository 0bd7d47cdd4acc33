"""The ELECTRA objective: masking rule, sampling, labels and losses."""

import shutil

import numpy as np
import pytest
import tensorflow as tf
from conftest import traced_step_ops

from keras_electra import kernels as kernel_tables
from keras_electra.pretraining import masking

CLS, SEP, PAD, MASK = 2, 3, 0, 4


@pytest.fixture(params=["compiled", "tensorflow"])
def kernels(request, monkeypatch):
    """The sampler and the loss as the compiled kernels compute them (kernels/kernels.cc,
    the ``native`` backend), and as TensorFlow's ops do (the ``xla`` one)."""
    if request.param == "compiled" and shutil.which("g++") is None:
        pytest.skip("no C++ compiler to build the compiled kernels with")
    monkeypatch.setenv(kernel_tables.ENV, "native" if request.param == "compiled" else "xla")
    return request.param


def seeds(a=1, b=2):
    return (tf.constant([a, 0]), tf.constant([b, 0]))


def random_batch(rng, batch=512, length=128, vocab=1000):
    lengths = rng.integers(10, length + 1, size=batch)
    ids = rng.integers(5, vocab, size=(batch, length)).astype("int32")
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype("int32")
    ids[:, 0] = CLS
    ids[np.arange(batch), lengths - 1] = SEP
    ids[mask == 0] = PAD
    return ids, mask


def test_masking_rates_on_a_large_batch():
    ids, mask = random_batch(np.random.default_rng(0))
    out = masking.mask_tokens(
        ids,
        mask,
        special_ids=(PAD, CLS, SEP),
        mask_token_id=MASK,
        max_predictions=int(0.155 * 128),
        seeds=seeds(),
    )
    weights = out.weights.numpy()
    positions = out.positions.numpy()
    chosen_ids = np.take_along_axis(ids, positions, axis=1)[weights > 0]
    real = ((mask == 1) & ~np.isin(ids, [CLS, SEP])).sum()

    selected_fraction = weights.sum() / real
    assert abs(selected_fraction - 0.15) <= 0.01, selected_fraction
    # Special tokens and padding are never chosen.
    assert not np.isin(chosen_ids, [PAD, CLS, SEP]).any()
    # Chosen positions are distinct within each row.
    for row, w in zip(positions, weights, strict=True):
        assert len(set(row[w > 0])) == int(w.sum())
    masked = out.token_ids.numpy()
    became_mask = np.take_along_axis(masked, positions, axis=1)[weights > 0] == MASK
    assert abs(became_mask.mean() - 0.85) <= 0.02, became_mask.mean()
    # Unchosen tokens are untouched; chosen ones are [MASK] or their original.
    changed = masked != ids
    assert changed.sum() == became_mask.sum()
    np.testing.assert_array_equal(out.labels.numpy()[weights > 0], chosen_ids)


def test_masking_small_fixed_example():
    ids = np.array([[CLS, 10, 11, 12, 13, SEP, PAD, PAD]], "int32")
    mask = np.array([[1, 1, 1, 1, 1, 1, 0, 0]], "int32")
    out = masking.mask_tokens(
        ids,
        mask,
        special_ids=(PAD, CLS, SEP),
        mask_token_id=MASK,
        mask_prob=0.5,
        mask_token_prob=1.0,
        max_predictions=3,
        seeds=seeds(),
    )
    # 4 candidates x 0.5 = 2 positions; the third slot is unused.
    np.testing.assert_array_equal(out.weights.numpy(), [[1.0, 1.0, 0.0]])
    chosen = out.positions.numpy()[0, :2]
    assert set(chosen) <= {1, 2, 3, 4}
    assert out.positions.numpy()[0, 2] == 0 and out.labels.numpy()[0, 2] == 0
    np.testing.assert_array_equal(out.labels.numpy()[0, :2], ids[0, chosen])
    expected = ids.copy()
    expected[0, chosen] = MASK
    np.testing.assert_array_equal(out.token_ids.numpy(), expected)


def test_masking_caps_and_empty_sequences():
    # A sequence with no candidate tokens chooses nothing; a long one is capped.
    ids = np.array([[CLS, SEP, PAD, PAD], [CLS, 7, 8, 9]], "int32")
    mask = np.array([[1, 1, 0, 0], [1, 1, 1, 1]], "int32")
    out = masking.mask_tokens(
        ids,
        mask,
        special_ids=(PAD, CLS, SEP),
        mask_token_id=MASK,
        mask_prob=0.9,
        max_predictions=2,
        seeds=seeds(),
    )
    np.testing.assert_array_equal(out.weights.numpy(), [[0, 0], [1, 1]])
    np.testing.assert_array_equal(out.token_ids.numpy()[0], ids[0])


def test_masking_is_deterministic_per_seed():
    ids, mask = random_batch(np.random.default_rng(1), batch=8)
    kw = dict(special_ids=(PAD, CLS, SEP), mask_token_id=MASK, max_predictions=19)
    a = masking.mask_tokens(ids, mask, seeds=seeds(5, 6), **kw)
    b = masking.mask_tokens(ids, mask, seeds=seeds(5, 6), **kw)
    c = masking.mask_tokens(ids, mask, seeds=seeds(7, 6), **kw)
    np.testing.assert_array_equal(a.positions.numpy(), b.positions.numpy())
    assert not np.array_equal(a.positions.numpy(), c.positions.numpy())


def test_replace_tokens_and_labels_count_correct_samples_as_original():
    ids = tf.constant([[CLS, 10, 11, 12, SEP, PAD]])
    mask = tf.constant([[1, 1, 1, 1, 1, 0]])
    positions = tf.constant([[1, 3, 0]])
    sampled = tf.constant([[10, 99, 7]])  # pos 1 sampled correctly; slot 3 unused
    weights = tf.constant([[1.0, 1.0, 0.0]])
    fake = masking.replace_tokens(ids, positions, sampled, weights)
    np.testing.assert_array_equal(fake.numpy(), [[CLS, 10, 11, 99, SEP, PAD]])
    labels = masking.replaced_labels(fake, ids, mask)
    np.testing.assert_array_equal(labels.numpy(), [[0, 0, 0, 1, 0, 0]])


def test_mlm_loss_matches_hand_computation():
    logits = np.array([[[2.0, 0.5, -1.0], [0.0, 1.0, 3.0], [9.0, 9.0, 9.0]]], "float32")
    labels = np.array([[0, 1, 2]], "int32")
    weights = np.array([[1.0, 1.0, 0.0]], "float32")

    def nll(row, label):
        return -(row[label] - np.log(np.exp(row).sum()))

    expected = (nll(logits[0, 0], 0) + nll(logits[0, 1], 1)) / 2
    got = masking.mlm_loss(logits, labels, weights).numpy()
    assert got == pytest.approx(expected, rel=1e-5)


def test_disc_loss_matches_hand_computation():
    logits = np.array([[1.5, -0.5, 2.0, 7.0]], "float32")
    labels = np.array([[1.0, 0.0, 0.0, 1.0]], "float32")
    mask = np.array([[1, 1, 1, 0]], "int32")  # the last token is padding

    def bce(x, y):
        p = 1 / (1 + np.exp(-x))
        return -(y * np.log(p) + (1 - y) * np.log(1 - p))

    expected = np.mean([bce(1.5, 1), bce(-0.5, 0), bce(2.0, 0)])
    got = masking.disc_loss(logits, labels, mask).numpy()
    assert got == pytest.approx(expected, rel=1e-5)


def test_sampling_follows_the_softmax_and_disallow_correct():
    probs = np.array([0.7, 0.2, 0.1], "float32")
    logits = np.broadcast_to(np.log(probs), (1, 20000, 3)).copy()
    labels = np.zeros((1, 20000), "int32")
    sampled = masking.sample_tokens(logits, labels, seed=tf.constant([3, 4])).numpy()
    freq = np.bincount(sampled.ravel(), minlength=3) / sampled.size
    np.testing.assert_allclose(freq, probs, atol=0.015)
    never = masking.sample_tokens(
        logits, labels, seed=tf.constant([3, 4]), disallow_correct=True
    ).numpy()
    assert (never != 0).all()
    # Low temperature concentrates on the argmax.
    cold = masking.sample_tokens(logits, labels, seed=tf.constant([3, 4]), temperature=0.05)
    assert (cold.numpy() == 0).mean() > 0.99


def test_sampling_has_no_gradient():
    logits = tf.Variable(tf.random.normal([2, 3, 10]))
    with tf.GradientTape() as tape:
        sampled = masking.sample_tokens(
            logits, tf.zeros([2, 3], tf.int32), seed=tf.constant([1, 1])
        )
        y = tf.reduce_sum(tf.cast(sampled, tf.float32) * tf.reduce_sum(logits))
    # Gradient only through the explicit logits sum, none through the sample itself.
    grad = tape.gradient(y, logits)
    np.testing.assert_allclose(grad.numpy(), float(tf.reduce_sum(tf.cast(sampled, tf.float32))))


def test_inverse_cdf_sampling_is_an_exact_draw_from_the_softmax(kernels):
    # A 50-token distribution with a heavy head, a long tail and an impossible token.
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 2.0, 50).astype("float32")
    logits[7] = -1e9
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    n = 200_000
    batch = np.broadcast_to(logits, (4, n // 4, 50)).copy()
    labels = np.zeros((4, n // 4), "int32")
    sampled = masking.sample_tokens(batch, labels, seed=tf.constant([9, 9])).numpy().ravel()
    counts = np.bincount(sampled, minlength=50)
    assert counts[7] == 0
    # Pearson's chi-square over the tokens expected at least 5 times (49 - 1 df at most).
    expected = probs * n
    keep = expected >= 5
    chi2 = (((counts - expected) ** 2)[keep] / expected[keep]).sum()
    assert chi2 < 85, chi2  # the 99.9th percentile of chi-square with 48 df is 84.0
    # Given draws, the sample is a pure function of them.
    u = tf.random.stateless_uniform(labels.shape, seed=[9, 9])
    again = masking.sample_tokens(batch, labels, uniform=u).numpy().ravel()
    np.testing.assert_array_equal(again, sampled)


@pytest.mark.parametrize("block", [8, 50, 128])
def test_two_level_inverse_cdf_picks_the_index_a_single_cumulative_sum_picks(block, kernels):
    # 50 entries: blocks of 8 leave a padded last block, 50 is one full block, 128 pads one.
    rng = np.random.default_rng(1)
    probs = rng.dirichlet(np.full(50, 0.3), size=2000).astype("float32")
    probs[:, 7] = 0.0  # an impossible entry inside a block
    probs[:, 48:] = 0.0  # and at the end: never chosen, however close u is to 1
    u = rng.random(2000).astype("float32")
    u[:5] = [0.0, 1e-9, 0.5, 1 - 1e-7, np.nextafter(np.float32(1), np.float32(0))]
    got = kernel_tables.table().inverse_cdf(tf.constant(probs), tf.constant(u), block=block).numpy()
    cdf = np.cumsum(probs.astype("float64"), axis=1)
    want = np.array(
        [np.searchsorted(c, x * c[-1], side="right") for c, x in zip(cdf, u, strict=True)]
    )
    # float32 rounding may move a draw that falls within ~1e-7 of a boundary.
    assert (got == want).mean() > 0.999, (got != want).sum()
    assert not np.isin(got, [7, 48, 49]).any()
    assert got[0] == 0 and got[4] == 47


def test_sampling_from_non_finite_logits_gives_ids_in_range(kernels):
    # A diverged step's logits must reach the on-NaN guard (a NaN loss), not crash a gather.
    logits = np.zeros((2, 3, 50), "float32")
    logits[0, 0, :] = np.nan
    logits[0, 1, 4] = np.inf
    logits[1, 2, :] = -np.inf
    labels = np.zeros((2, 3), "int32")
    for block in (8, 50, 128):
        sampled = masking.sample_tokens(logits, labels, seed=tf.constant([1, 2]), block=block)
        assert ((sampled.numpy() >= 0) & (sampled.numpy() < 50)).all()


def test_two_level_sampling_is_an_exact_draw_with_a_padded_last_block(kernels):
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 2.0, 50).astype("float32")
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    n = 200_000
    batch = np.broadcast_to(logits, (4, n // 4, 50)).copy()
    labels = np.zeros((4, n // 4), "int32")
    sampled = masking.sample_tokens(batch, labels, seed=tf.constant([5, 6]), block=8)
    counts = np.bincount(sampled.numpy().ravel(), minlength=50)
    expected = probs * n
    keep = expected >= 5
    chi2 = (((counts - expected) ** 2)[keep] / expected[keep]).sum()
    assert chi2 < 85.4, chi2  # the 99.9th percentile of chi-square with 49 df


def test_masking_from_given_uniform_draws_equals_masking_from_seeds():
    ids, mask = random_batch(np.random.default_rng(2), batch=6)
    kw = dict(special_ids=(PAD, CLS, SEP), mask_token_id=MASK, max_predictions=19)
    s = seeds(3, 4)
    from_seeds = masking.mask_tokens(ids, mask, seeds=s, **kw)
    uniforms = (
        tf.random.stateless_uniform(ids.shape, seed=s[0]),
        tf.random.stateless_uniform([6, 19], seed=s[1]),
    )
    given = masking.mask_tokens(ids, mask, uniforms=uniforms, **kw)
    for a, b in zip(from_seeds, given, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(ValueError, match="exactly one"):
        masking.mask_tokens(ids, mask, **kw)


def _ancestors(op) -> set:
    """The names of every op ``op`` waits for, through data and control edges."""
    seen, stack = set(), [op]
    while stack:
        current = stack.pop()
        for parent in [t.op for t in current.inputs] + list(current.control_inputs):
            if parent.name not in seen:
                seen.add(parent.name)
                stack.append(parent)
    return seen


def test_the_mlm_loss_waits_for_the_sample(kernels):
    """The loss's float32 softmax over [positions, vocabulary] (or the compiled loss
    kernel) comes after the sampler's, so the two are never alive at once (side by
    side they made ELECTRA-Small's memory peak)."""
    ops = traced_step_ops("mixed_bfloat16")
    softmaxes = [op for op in ops if op.type == "Softmax" and op.outputs[0].shape[-1] == 300]
    loss = [op for op in softmaxes if "cross_entropy" in op.name]
    if kernels == "compiled":
        loss = [op for op in ops if op.type == "ElectraSoftmaxXent"]
    sampler = [op for op in softmaxes if "cross_entropy" not in op.name]
    assert len(loss) == 1 and len(sampler) == 1, [op.name for op in softmaxes]
    assert sampler[0].name in _ancestors(loss[0])


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_the_losss_probabilities_draw_the_samples_the_sampler_draws(dtype, monkeypatch):
    """At temperature 1 the step samples from the MLM loss's softmax: the same ids as
    ``sample_tokens`` from the same draws, and the loss and its gradient unchanged
    (TensorFlow's ops; the compiled loss kernel against them: the test below)."""
    monkeypatch.setenv(kernel_tables.ENV, "xla")  # TensorFlow's softmax and search
    rng = np.random.default_rng(12)
    logits = tf.constant(rng.normal(0, 3, (3, 7, 300)), dtype)
    labels = tf.constant(rng.integers(0, 300, (3, 7)), tf.int32)
    weights = tf.constant(rng.random((3, 7)) > 0.2, tf.float32)
    uniform = tf.random.stateless_uniform([3, 7], seed=[5, 6])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        loss, predicted, probs = masking.mlm_loss_and_predictions(
            logits, labels, weights, probabilities=True
        )
        plain_loss, plain_predicted = masking.mlm_loss_and_predictions(logits, labels, weights)
    assert probs.dtype == tf.float32 and probs.shape == logits.shape
    np.testing.assert_array_equal(
        probs.numpy(), tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1).numpy()
    )
    shared = kernel_tables.table().inverse_cdf(probs, uniform).numpy()
    own = masking.sample_tokens(logits, labels, uniform=uniform).numpy()
    np.testing.assert_array_equal(shared, own)
    assert float(loss) == float(plain_loss)
    np.testing.assert_array_equal(predicted.numpy(), plain_predicted.numpy())
    np.testing.assert_array_equal(
        tape.gradient(loss, logits).numpy(), tape.gradient(plain_loss, logits).numpy()
    )


def test_at_temperature_one_the_step_has_one_vocabulary_softmax(kernels):
    """The small presets' temperature 1: the sampler takes the loss's softmax (one
    float32 softmax over the vocabulary in the traced step, not two); the compiled
    kernels draw the sample in the loss's kernel and write no float32 softmax at all."""
    ops = traced_step_ops("mixed_bfloat16", {"temperature": 1.0})
    softmaxes = [op for op in ops if op.type == "Softmax" and op.outputs[0].shape[-1] == 300]
    if kernels == "compiled":
        assert not softmaxes, [op.name for op in softmaxes]
        (loss,) = [op for op in ops if op.type == "ElectraSoftmaxXent"]
        assert loss.outputs[3].consumers()  # the sample is used
        assert not [op for op in ops if op.type == "ElectraInverseCdf"]
        return
    assert len(softmaxes) == 1 and "cross_entropy" in softmaxes[0].name, [
        op.name for op in softmaxes
    ]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler for the kernels")
@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_the_compiled_loss_samples_and_differentiates_as_tensorflows_ops(dtype, monkeypatch):
    """The compiled loss kernel's loss, argmax, gradient and samples against the same
    quantities from TensorFlow's softmax (the sample may move only for a draw within a
    rounding step of a boundary)."""
    rng = np.random.default_rng(13)
    logits = tf.constant(rng.normal(0, 3, (4, 9, 500)), dtype)
    labels = tf.constant(rng.integers(0, 500, (4, 9)), tf.int32)
    weights = tf.constant(rng.random((4, 9)) > 0.2, tf.float32)
    uniform = tf.random.stateless_uniform([4, 9], seed=[3, 4])

    def run():
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss, predicted, sampled = masking.mlm_loss_and_predictions(
                logits, labels, weights, uniform=uniform
            )
        grad = tf.cast(tape.gradient(loss, logits), tf.float32)
        return float(loss), predicted.numpy(), sampled.numpy(), grad.numpy()

    ours = run()
    monkeypatch.setenv(kernel_tables.ENV, "xla")  # TensorFlow's softmax and search
    theirs = run()
    assert abs(ours[0] - theirs[0]) <= 1e-5 * abs(theirs[0])
    np.testing.assert_array_equal(ours[1], theirs[1])
    assert (ours[2] == theirs[2]).mean() >= 0.97
    step = 2**-8 if dtype == tf.bfloat16 else 1e-6
    assert np.abs(ours[3] - theirs[3]).max() <= step * np.abs(theirs[3]).max() + 1e-9


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler for the kernels")
def test_the_compiled_losss_samples_are_an_exact_draw_from_the_softmax():
    """Pearson's chi-square of the compiled loss kernel's draws against the softmax."""
    rng = np.random.default_rng(0)
    vocab = 300  # blocks of 128: a padded last block
    logits = rng.normal(0.0, 2.0, vocab).astype("float32")
    logits[7] = -1e9
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    n = 200_000
    batch = tf.constant(np.broadcast_to(logits, (4, n // 4, vocab)))
    labels = tf.zeros((4, n // 4), tf.int32)
    uniform = tf.random.stateless_uniform(labels.shape, seed=[7, 8])
    _, _, sampled = masking.mlm_loss_and_predictions(
        batch, labels, tf.ones(labels.shape), uniform=uniform
    )
    counts = np.bincount(sampled.numpy().ravel(), minlength=vocab)
    assert counts[7] == 0
    expected = probs * n
    keep = expected >= 5
    chi2 = (((counts - expected) ** 2)[keep] / expected[keep]).sum()
    df = int(keep.sum()) - 1
    # The 99.9th percentile of chi-square with df degrees of freedom (Wilson-Hilferty).
    z = 3.090
    limit = df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3
    assert chi2 < limit, (chi2, limit, df)
