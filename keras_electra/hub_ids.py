"""Hugging Face model ids as the commands take them (``hf:ORG/NAME``): their syntax, which
the command line checks before TensorFlow loads (:mod:`keras_electra.convert.hub` fetches
and converts them)."""

from __future__ import annotations

from pathlib import Path

from keras_electra.errors import ConfigError

PREFIX = "hf:"


def is_hub_id(source: str | Path | None) -> bool:
    """Whether ``source`` names a Hub model (``hf:ORG/NAME``) rather than a path."""
    return isinstance(source, str) and source.startswith(PREFIX)


def repo_id(model: str) -> str:
    """The Hub's repository id of ``hf:ORG/NAME`` (or ``ORG/NAME``).

    Raises:
        ConfigError: if it is not ``ORG/NAME`` or ``NAME``.

    Examples:
        >>> repo_id("hf:google/electra-small-discriminator")
        'google/electra-small-discriminator'
    """
    repo = model[len(PREFIX) :] if model.startswith(PREFIX) else model
    parts = repo.split("/")
    if len(parts) > 2 or not all(parts) or any(p in (".", "..") for p in parts):
        raise ConfigError(
            f"'{model}' is not a Hugging Face model id; write hf:ORG/NAME, such as "
            "hf:google/electra-small-discriminator."
        )
    return repo


def check_hub_id(source: str | Path | None) -> None:
    """Raises ConfigError if ``source`` starts with ``hf:`` but is not a model id; anything
    else (a path) passes."""
    if is_hub_id(source):
        repo_id(str(source))
