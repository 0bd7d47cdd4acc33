"""LAMB: Adam moments with a layer-wise trust ratio, for very large batches (You et al., 2019)."""

from __future__ import annotations

import keras
from keras import ops

from keras_electra import internals

# LayerNorm's scale and offset and every bias: the variables ELECTRA does not decay, by
# name (Keras' LayerNormalization names its weights gamma and beta). The update reads a
# Keras variable's name ("gamma") or its TensorFlow variable's ("embedding/.../gamma:0").
NO_DECAY = r"(^|/)(gamma|beta)(:\d+)?$|bias(:\d+)?$"


class DecayExclusions:
    """Mixin for a Keras optimizer (before it in the bases): ``no_decay``, a regular
    expression that a variable's name matches when it is not decayed, taken when the
    optimizer is made and kept in its config. Keras' ``exclude_from_weight_decay`` keeps
    neither its ``var_list`` nor its ``var_names`` in a ``.keras`` file: an optimizer
    reloaded from one decayed every LayerNorm parameter and bias."""

    def __init__(self, *args, no_decay: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.no_decay = no_decay
        if no_decay:
            self.exclude_from_weight_decay(var_names=[no_decay])

    def get_config(self):
        return {**super().get_config(), "no_decay": self.no_decay}


@keras.saving.register_keras_serializable(package="keras_electra")
class Lamb(DecayExclusions, internals.OptimizerHooks, keras.optimizers.Optimizer):
    """LAMB. For each variable ``w`` with gradient ``g`` at step ``t`` (Algorithm 2 of the
    paper, with bias correction):

    ```
    m = beta_1 * m + (1 - beta_1) * g
    v = beta_2 * v + (1 - beta_2) * g**2
    r = (m / (1 - beta_1**t)) / (sqrt(v / (1 - beta_2**t)) + epsilon) + weight_decay * w
    trust = ||w|| / ||r||      (1 when either norm is 0)
    w = w - learning_rate * trust * r
    ```

    The norms are per variable (the paper's "layer"). Variables excluded from
    weight decay (:meth:`exclude_from_weight_decay`; ELECTRA excludes LayerNorm
    parameters and biases) also skip the trust ratio, so they take Adam-sized
    steps. Weight decay is part of ``r`` above, not applied separately.

    Args:
        learning_rate: a float or a schedule.
        beta_1, beta_2: decay rates of the first and second moments.
        epsilon: added to the root of the second moment.
        weight_decay: decoupled weight decay rate (inside the trust ratio).
        **kwargs: other :class:`keras.optimizers.Optimizer` arguments
            (``global_clipnorm``, ``name``...).

    Examples:
        >>> import numpy as np
        >>> w = keras.Variable(np.ones(4, "float32"))
        >>> opt = Lamb(learning_rate=0.1, weight_decay=0.0)
        >>> opt.apply([keras.ops.ones(4)], [w])  # r = 1 and ||w|| / ||r|| = 1
        >>> [round(float(v), 4) for v in keras.ops.convert_to_numpy(w)]
        [0.9, 0.9, 0.9, 0.9]
    """

    def __init__(
        self,
        learning_rate=0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        weight_decay: float = 0.01,
        name: str = "lamb",
        **kwargs,
    ):
        super().__init__(
            learning_rate=learning_rate, weight_decay=weight_decay, name=name, **kwargs
        )
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._momentums, self._velocities = self.add_optimizer_variables(
            var_list, ["momentum", "velocity"]
        )

    def decay_weights(self, variables):
        """No separate decay step: LAMB decays inside its update (see :meth:`update_step`)."""

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        gradient = ops.cast(gradient, dtype)
        step = ops.cast(self.iterations + 1, dtype)
        index = internals.variable_index(self, variable)
        m, v = self._momentums[index], self._velocities[index]

        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2))
        m_hat = ops.divide(m, 1 - ops.power(ops.cast(self.beta_1, dtype), step))
        v_hat = ops.divide(v, 1 - ops.power(ops.cast(self.beta_2, dtype), step))
        update = ops.divide(m_hat, ops.add(ops.sqrt(v_hat), self.epsilon))
        if internals.uses_weight_decay(self, variable):  # not a LayerNorm parameter or bias
            if self.weight_decay:
                decay = ops.cast(self.weight_decay, dtype)
                update = ops.add(update, ops.multiply(decay, variable))
            w_norm = ops.sqrt(ops.sum(ops.square(variable)))
            r_norm = ops.sqrt(ops.sum(ops.square(update)))
            both = ops.logical_and(ops.greater(w_norm, 0), ops.greater(r_norm, 0))
            trust = ops.where(both, ops.divide(w_norm, ops.maximum(r_norm, 1e-30)), 1.0)
            update = ops.multiply(update, trust)
        self.assign_sub(variable, ops.multiply(lr, update))

    def get_config(self):
        config = super().get_config()
        config.update({"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon})
        return config
