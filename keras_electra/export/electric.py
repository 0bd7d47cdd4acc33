"""An Electric run's export: per-token energies and a sentence score, for TF Serving.

``keras-electra export`` writes this for a run pretrained with ``--objective electric``
(:mod:`keras_electra.pretraining.objectives.electric`). Its ``serving_default`` (input
``text``) and ``score_pair`` (``text_a``, ``text_b``) return, for ``L`` the fixed
sequence length:

- ``energy`` ``[B, L]`` float32: ``E(x)_t``, how badly each token fits its context (the
  discriminator head's output; 0 at padding);
- ``sentence_score`` ``[B]`` float32: ``-sum_t E(x)_t`` over the text's word pieces
  (``[CLS]`` and ``[SEP]`` left out), an unnormalized pseudo-log-likelihood from one
  forward pass: higher means more plausible; compare it between texts of similar length;
- ``tokens`` ``[B, L]`` string, ``token_ids`` ``[B, L]`` int32, ``num_tokens`` ``[B]``.

The export reader's kind for it is ``sentence_score``
(:mod:`keras_electra.serving.export_reader`).
"""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf

from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.errors import ConfigError
from keras_electra.export.saved_model import ReplacedTokenModule
from keras_electra.pretraining.objectives.electric import sentence_scores


class EnergyModule(ReplacedTokenModule):
    """Electric's discriminator with its tokenizer, as TF Serving signatures: the
    replaced-token module's signatures and warm-up, with energies and a sentence score
    for outputs.

    Args:
        tokenizer: the run's tokenizer.
        discriminator: the discriminator ``ElectraBackbone``.
        head: the energy head (a ``DiscriminatorHead``).
        special_ids: the ids a sentence score leaves out (``[CLS]``, ``[SEP]``).
        max_length: the fixed sequence length ``L`` of every output.
    """

    def __init__(
        self,
        tokenizer: ElectraTokenizer,
        discriminator,
        head,
        special_ids: tuple[int, ...],
        max_length: int,
    ):
        super().__init__(tokenizer, discriminator, head, max_length, name="electric_energies")
        self.special_ids = tuple(int(i) for i in special_ids)

    def _score(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        mask = inputs["padding_mask"]
        real = tf.cast(mask, tf.float32)
        energies = tf.cast(self.head(self.discriminator(inputs, training=False)), tf.float32)
        scored = real
        for token_id in self.special_ids:
            scored *= tf.cast(tf.not_equal(inputs["token_ids"], token_id), tf.float32)
        present = tf.cast(mask, tf.bool)
        return {
            "energy": energies * real,
            "sentence_score": sentence_scores(energies, scored),
            "tokens": tf.where(present, self.tokenizer.detokenize_ids(inputs["token_ids"]), ""),
            "token_ids": inputs["token_ids"],
            "num_tokens": tf.reduce_sum(mask, axis=1),
        }

    @classmethod
    def from_run(cls, run_dir: str | Path, max_length: int | None = None) -> EnergyModule:
        """The module for an Electric run's discriminator (latest checkpoint).

        Raises:
            ConfigError: if the run was not pretrained with ``--objective electric``.
        """
        return super().from_run(run_dir, max_length)

    @classmethod
    def _check_run(cls, model, run_dir: str | Path) -> None:
        if model.objective != "electric":
            raise ConfigError(
                f"Run '{run_dir}' was pretrained with --objective {model.objective}, which "
                "gives no energies; export it as it is, or pretrain with --objective electric."
            )

    @classmethod
    def _from_model(cls, model, tokenizer: ElectraTokenizer, length: int) -> EnergyModule:
        specials = (model.config.cls_token_id, model.config.sep_token_id)
        return cls(tokenizer, model.discriminator_backbone(), model.token_head, specials, length)
