"""Dense layers' training path: bias gradients summed in float32, projections as 2-D matmuls.

Two things Keras' ``Dense`` and ``EinsumDense`` do on TensorFlow cost accuracy or time
in training (measured in benchmarks/measurements.md):

- **Bias gradients under a 16-bit policy.** ``tf.nn.bias_add``'s gradient,
  ``BiasAddGrad``, accumulates a bfloat16 gradient in bfloat16 (10% off over 4,096
  rows). :func:`keras_electra.kernels.shared.bias_add` sums it with ``tf.reduce_sum``,
  which accumulates in float32.
- **The attention's projections.** ``EinsumDense("abc,cde->abde")`` is a broadcast batch
  matmul, whose kernel gradient is one product per sequence, then summed. As a
  ``[batch * length, width]`` matmul (reshapes, no copies) it is one product.

:class:`Dense` and :class:`EinsumDense`, which the model's layers are built as, are
Keras' layers whose training call is the kernel table's ``dense``
(:mod:`keras_electra.kernels`): the 2-D matmul on the ``xla`` and ``native`` backends,
Keras' own call on ``reference``. Inference keeps Keras' own ``call``, so SavedModels,
weights, config and checkpoints are unchanged.
"""

from __future__ import annotations

import functools

import keras

from keras_electra import kernels

# EinsumDense equations taken as 2-D matmuls: the input's last 1 or 2 axes are
# contracted with the kernel's first ones, the kernel's remaining axes are the output's.
_EQUATIONS = {"abc,cde->abde": 1, "abcd,cde->abe": 2, "abc,cd->abd": 1, "ab,bc->ac": 1}


@keras.saving.register_keras_serializable(package="keras_electra")
class Dense(keras.layers.Dense):
    """``keras.layers.Dense`` with the kernels' training path (same weights, config,
    inference)."""

    def call(self, inputs, training=None):
        keras_call = functools.partial(super().call, training=training)
        return kernels.table(training).dense(self, inputs, 1, keras_call)


@keras.saving.register_keras_serializable(package="keras_electra")
class EinsumDense(keras.layers.EinsumDense):
    """``keras.layers.EinsumDense`` with the training path for 2-D matmul equations (same
    weights, config and inference)."""

    def call(self, inputs, training=None):
        keras_call = functools.partial(super().call, training=training)
        contracted = _EQUATIONS.get(self.equation)
        return kernels.table(training).dense(self, inputs, contracted, keras_call)
