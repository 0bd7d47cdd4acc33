"""What a fine-tuned model is (``finetune.json``); the recipe and options, which live in
:mod:`keras_electra.settings`, are named here too (their values: docs/finetuning.md).

Examples:
    >>> recipe_defaults("base")["learning_rate"]
    0.0001
    >>> check_task("classify")
    'classify'
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from keras_electra.atomic import write_json
from keras_electra.config import PRESETS, ElectraConfig
from keras_electra.errors import ConfigError
from keras_electra.settings import (  # noqa: F401 - the fine-tuning API names them here too
    TASK_EPOCHS,
    TASKS,
    FinetuneOptions,
    check_task,
    recipe_defaults,
)


def infer_preset(config: ElectraConfig) -> str:
    """The preset whose discriminator size matches ``config`` (nearest hidden size otherwise).

    Examples:
        >>> infer_preset(ElectraConfig.from_preset("base", vocab_size=100))
        'base'
    """
    for name, values in PRESETS.items():
        if name != "tiny" and values["hidden_size"] == config.hidden_size:
            return name
    size = config.hidden_size
    if size <= PRESETS["tiny"]["hidden_size"]:
        return "tiny"
    return min(("small", "base", "large"), key=lambda n: abs(PRESETS[n]["hidden_size"] - size))


def _as_option(name: str) -> Any:
    """A field with the default of the :class:`FinetuneOptions` field of that name."""
    return field(default=FinetuneOptions.__dataclass_fields__[name].default)


@dataclass
class FinetuneSettings:
    """Everything that defines a fine-tuned model, saved as ``finetune.json``.

    The fields it shares with :class:`FinetuneOptions` (by name: the columns, lengths,
    ``pooling``, QA's windowing) mean what they mean there and take their defaults from
    there; :meth:`from_options` copies their values.

    Args:
        task: one of :data:`TASKS`.
        labels: class names (classify) or tag names (tag), in output order.
        training: the optimizer settings used (for the record).
        source: the run or init directory the backbone came from.
    """

    task: str
    labels: list[str] = field(default_factory=list)
    max_seq_length: int = _as_option("max_seq_length")
    text_column: str = _as_option("text_column")
    text_pair_column: str | None = _as_option("text_pair_column")
    label_column: str = _as_option("label_column")
    dropout: float = 0.1  # the recipe's (FinetuneOptions leaves it None until resolved)
    pooling: str = _as_option("pooling")
    version_2: bool = _as_option("version_2")
    doc_stride: int = _as_option("doc_stride")
    max_query_length: int = _as_option("max_query_length")
    max_answer_length: int = _as_option("max_answer_length")
    training: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    @classmethod
    def from_options(cls, task: str, options: FinetuneOptions, **values: Any) -> FinetuneSettings:
        """The settings of a model fine-tuned with resolved ``options``; ``values`` gives
        the rest (``training``, ``source``, ``labels``)."""
        shared = {
            f.name: getattr(options, f.name)
            for f in dataclasses.fields(cls)
            if f.name in FinetuneOptions.__dataclass_fields__
        }
        return cls(task=task, **{**shared, **values})

    def save(self, path: str | Path) -> None:
        write_json(path, asdict(self))

    @classmethod
    def load(cls, path: str | Path) -> FinetuneSettings:
        try:
            return cls(**json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as e:
            raise ConfigError(
                f"{path} is not a valid fine-tuning file ({str(e).splitlines()[0][:120]}); "
                "fine-tune again to rewrite it."
            ) from None
