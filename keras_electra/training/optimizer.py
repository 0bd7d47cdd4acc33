"""AdamW with ELECTRA's settings and a linear warm-up / linear decay schedule."""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from keras_electra import internals, kernels
from keras_electra.errors import ConfigError
from keras_electra.settings import LAMB_BIAS_CORRECTION, OPTIMIZERS
from keras_electra.training.lamb import NO_DECAY, DecayExclusions, Lamb


@keras.saving.register_keras_serializable(package="keras_electra")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear decay from ``peak`` at step 0 to 0 at ``total_steps``, times a linear warm-up
    from 0 to 1 over ``warmup_steps``: ``peak * (1 - step / total_steps) * min(1, step /
    warmup_steps)``, google-research/electra's schedule (``model/optimization.py``). The
    rate at the end of the warm-up is ``peak * (1 - warmup_steps / total_steps)`` (0.9 of
    the peak with fine-tuning's 10% warm-up), and it never jumps.

    Examples:
        >>> schedule = WarmupLinearDecay(1e-3, warmup_steps=10, total_steps=100)
        >>> [round(float(schedule(s)), 6) for s in (0, 5, 10, 100)]
        [0.0, 0.000475, 0.0009, 0.0]
    """

    def __init__(self, peak: float, warmup_steps: int, total_steps: int):
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = max(1, int(total_steps))

    def __call__(self, step):
        step = ops.cast(step, "float32")
        decayed = self.peak * ops.maximum(0.0, 1.0 - step / self.total_steps)
        if self.warmup_steps <= 0:
            return decayed
        return decayed * ops.minimum(1.0, step / self.warmup_steps)

    def get_config(self):
        return {
            "peak": self.peak,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
        }


@keras.saving.register_keras_serializable(package="keras_electra")
class AdamW(DecayExclusions, internals.OptimizerHooks, keras.optimizers.AdamW):
    """Keras' AdamW, each dense update one fused kernel.

    The update and variables of :class:`keras.optimizers.AdamW` (checkpoints are
    interchangeable), each dense update the kernel table's ``adam_w``
    (:mod:`keras_electra.kernels`): on ``native`` one pass per float32 variable applies
    clipping's factor (``gradient_scale``), the decay and Adam's step; elsewhere
    ``ResourceApplyAdam`` follows the decay. Sparse gradients and ``amsgrad`` take Keras'
    path. The scalars the updates share are made once per step, not per variable (for
    ELECTRA-Small, 24,558 graph nodes down to about 17,000).

    Args:
        bias_correction: Adam's bias correction (Keras' update). False: the step is
            ``learning_rate * m / (sqrt(v) + epsilon)`` with the uncorrected moments, as
            google-research/electra's ``AdamWeightDecayOptimizer`` updates (larger early
            steps: 3.2x at step 100); the weight decay is the same either way.
        **kwargs: :class:`keras.optimizers.AdamW` arguments.

    Examples:
        >>> AdamW(learning_rate=1e-3, weight_decay=0.01).weight_decay
        0.01
    """

    # Clipping's factor for the gradients of the update being traced (a scalar tensor),
    # set by training.step.clipped_already; None: the gradients are applied as given.
    gradient_scale = None

    def __init__(self, *args, bias_correction: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.bias_correction = bool(bias_correction)

    def get_config(self):
        return {**super().get_config(), "bias_correction": self.bias_correction}

    @property
    def takes_gradient_scale(self) -> bool:
        """Whether clipping may hand this optimizer unscaled gradients and the factor
        (not with Keras' gradient accumulation, whose sums would mix steps' factors)."""
        return not self.gradient_accumulation_steps

    def _rate_factor(self, variable) -> float:
        """The factor on this variable's learning rate and decay (per layer in fine-tuning)."""
        return 1.0

    def decay_weights(self, variables):
        """Nothing here: each variable is decayed in its own update (:meth:`update_step`)."""

    def update_variables(self, gradients, variables, learning_rate):
        # Handed to each variable's update_step where Keras hands the learning rate.
        shared = {
            name: self._adam_scalars(tf.as_dtype(name), learning_rate)
            for name in sorted({tf.as_dtype(v.dtype).name for v in variables})
        }
        super().update_variables(gradients, variables, shared)

    def _adam_scalars(self, dtype: tf.DType, learning_rate) -> dict:
        """``ResourceApplyAdam``'s scalar arguments for this step, in ``dtype``. Without
        bias correction both powers are 0, so every kernel's ``lr * sqrt(1 - beta2_power)
        / (1 - beta1_power)`` is ``lr``."""
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        if self.bias_correction:
            step = tf.cast(self.iterations + 1, dtype)
            powers = tf.pow(beta_1, step), tf.pow(beta_2, step)
        else:
            powers = tf.zeros([], dtype), tf.zeros([], dtype)
        return dict(
            beta1_power=powers[0],
            beta2_power=powers[1],
            lr=tf.cast(learning_rate, dtype),
            beta1=beta_1,
            beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype),
        )

    def _decay_rate(self, variable, scalars: dict, cache: dict | None):
        """``lr * weight_decay * factor`` for this variable, or None where it is not
        decayed; made once per (dtype, factor) per step when ``cache`` is the step's."""
        if self.weight_decay is None or not internals.uses_weight_decay(self, variable):
            return None
        dtype, factor = tf.as_dtype(variable.dtype), self._rate_factor(variable)
        key, cache = ("decay", dtype.name, factor), {} if cache is None else cache
        if key not in cache:
            rate = scalars["lr"] * tf.cast(self.weight_decay, dtype)
            cache[key] = rate * tf.cast(factor, dtype) if factor != 1.0 else rate
        return cache[key]

    def update_step(self, gradient, variable, learning_rate):
        shared = learning_rate if isinstance(learning_rate, dict) else None
        dtype, factor = tf.as_dtype(variable.dtype), self._rate_factor(variable)
        if shared is None:  # called on its own, not from apply()
            scalars = self._adam_scalars(dtype, learning_rate)
        else:
            scalars = shared[dtype.name]
        decay = self._decay_rate(variable, scalars, shared)
        scale = self.gradient_scale
        if factor != 1.0:
            scalars = {**scalars, "lr": scalars["lr"] * factor}
        m, v = internals.adam_slots(self, variable)
        if not (isinstance(gradient, tf.IndexedSlices) or self.amsgrad):
            kernels.table().adam_w(variable, m, v, gradient, scalars, scale, decay)
            return None
        if scale is not None:
            gradient = gradient * tf.cast(scale, gradient.dtype)
        if decay is not None:
            variable.assign_sub(variable * decay)
        rate = scalars["lr"]
        if not self.bias_correction:  # undo the correction Keras' step applies: alpha = lr
            step = tf.cast(self.iterations + 1, dtype)
            beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
            rate = rate * (1 - tf.pow(beta_1, step)) / tf.sqrt(1 - tf.pow(beta_2, step))
        return super().update_step(gradient, variable, rate)


# Keras' default initial loss scale (2**15) overflows float16 gradients for the first
# four steps of the tiny model (the RTD loss weight of 50 scales them up); the
# dynamic scale settled at 2**11, so start there.
INITIAL_LOSS_SCALE = 2.0**11


def adamw_arguments(
    learning_rate: float,
    total_steps: int,
    warmup_steps: int,
    weight_decay: float,
    clip_norm: float | None,
    bias_correction: bool = True,
) -> dict:
    """ELECTRA's AdamW settings (beta1 0.9, beta2 0.999, eps 1e-6, warm-up then decay, no
    decay of LayerNorm parameters and biases), for pretraining and fine-tuning alike:
    :class:`AdamW`'s arguments."""
    return dict(
        no_decay=NO_DECAY,
        learning_rate=WarmupLinearDecay(learning_rate, warmup_steps, total_steps),
        weight_decay=weight_decay,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        global_clipnorm=clip_norm,
        bias_correction=bias_correction,
    )


def create_optimizer(
    model: keras.Model,
    *,
    learning_rate: float,
    total_steps: int,
    warmup_steps: int,
    weight_decay: float = 0.01,
    clip_norm: float | None = 1.0,
    loss_scale: bool = False,
    optimizer: str = "adamw",
    bias_correction: bool = True,
) -> keras.optimizers.Optimizer:
    """AdamW (beta1 0.9, beta2 0.999, eps 1e-6) as ELECTRA pretrains with, or LAMB (the same
    settings, each variable's step scaled by its trust ratio: for very large batches).

    Weight decay skips LayerNorm parameters and biases; gradients are clipped to a global
    norm of ``clip_norm``.

    Args:
        model: the model it optimizes. LayerNorm parameters and biases are left out of
            the decay by their names (``NO_DECAY``), so the optimizer saved in a
            ``.keras`` file keeps them out when it is loaded again.
        learning_rate: the peak learning rate.
        total_steps: steps until the rate reaches 0.
        warmup_steps: steps of linear warm-up.
        weight_decay: decoupled weight decay rate.
        clip_norm: global gradient-norm clip (None for none).
        loss_scale: wrap in a dynamic ``LossScaleOptimizer`` (for float16): the
            model's ``train_step`` scales the loss, ``apply`` unscales the
            gradients and skips a step whose gradients overflowed.
        optimizer: ``adamw`` or ``lamb``.
        bias_correction: AdamW's bias correction; False updates as google-research/electra's
            optimizer (:class:`AdamW`). LAMB always corrects.

    Raises:
        ConfigError: for an unknown ``optimizer``, or LAMB without bias correction.
    """
    if optimizer not in OPTIMIZERS:
        raise ConfigError(
            f"Unknown optimizer '{optimizer}'; choose one of: {', '.join(OPTIMIZERS)}."
        )
    if optimizer == "lamb" and not bias_correction:
        raise ConfigError(LAMB_BIAS_CORRECTION)
    arguments = adamw_arguments(
        learning_rate, total_steps, warmup_steps, weight_decay, clip_norm, bias_correction
    )
    if optimizer == "lamb":
        del arguments["bias_correction"]
        created = Lamb(**arguments)
    else:
        created = AdamW(**arguments)
    if loss_scale:
        return keras.optimizers.LossScaleOptimizer(created, initial_scale=INITIAL_LOSS_SCALE)
    return created
