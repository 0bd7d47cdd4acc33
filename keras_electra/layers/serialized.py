"""The constructor arguments of the layers here, kept and serialized in one place.

A layer lists in ``CONFIG`` the arguments its constructor takes beyond Keras' own
(``name``, ``dtype``, ``trainable``). :meth:`Serialized.keep` stores them as
attributes of the same names, and ``get_config`` returns them. Arguments named
``*initializer`` and ``activation`` are kept as Keras objects and serialized as
Keras serializes its own.

Examples:
    >>> from keras_electra.layers.heads import DiscriminatorHead
    >>> sorted(DiscriminatorHead(8, 0.02).get_config())[:3]
    ['dtype', 'hidden_dim', 'initializer_range']
"""

from __future__ import annotations

from typing import Any, ClassVar

import keras


def _kind(name: str):
    """Keras' module for an argument kept as a Keras object, else None."""
    if name.endswith("initializer"):
        return keras.initializers
    return keras.activations if name == "activation" else None


class Serialized:
    """Mixin (before ``keras.layers.Layer`` in the bases): ``CONFIG`` kept and serialized."""

    CONFIG: ClassVar[tuple[str, ...]] = ()

    def keep(self, arguments: dict[str, Any]) -> None:
        """Store the ``CONFIG`` entries of ``arguments`` (the constructor's ``locals()``)."""
        for name in self.CONFIG:
            kind = _kind(name)
            setattr(self, name, arguments[name] if kind is None else kind.get(arguments[name]))

    def get_config(self) -> dict:
        config = super().get_config()
        for name in self.CONFIG:
            kind = _kind(name)
            value = getattr(self, name)
            config[name] = value if kind is None else kind.serialize(value)
        return config
