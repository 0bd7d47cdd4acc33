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
    """The preset whose sizes ``config`` has: the discriminator's (hidden size, layers,
    heads, feed-forward and embedding sizes) and the generator's (hidden size and layers,
    which alone tell ``small`` from ``small++``). Every caller needs a preset's recipe, so
    a config of no preset's sizes gets the nearest: of the presets nearest in hidden size
    (``tiny`` up to its 128), the one that differs in the fewest sizes (the first, on a
    tie).

    Examples:
        >>> infer_preset(ElectraConfig.from_preset("base", vocab_size=100))
        'base'
        >>> infer_preset(ElectraConfig.from_preset("small++", vocab_size=100))
        'small++'
        >>> infer_preset(ElectraConfig.from_preset("small++", num_layers=6))
        'small++'
    """
    size = config.hidden_size
    if size <= PRESETS["tiny"]["hidden_size"]:
        nearest = ["tiny"]
    else:
        gaps = {n: abs(v["hidden_size"] - size) for n, v in PRESETS.items() if n != "tiny"}
        nearest = [n for n, gap in gaps.items() if gap == min(gaps.values())]
    ours = _preset_sizes(config)

    def differences(name: str) -> int:
        theirs = _preset_sizes(ElectraConfig.from_preset(name))
        return sum(a != b for a, b in zip(ours, theirs, strict=True))

    return min(nearest, key=differences)


# The discriminator's sizes that tell the presets apart (the vocabulary and the position
# table do not); with the generator's (_preset_sizes), which tell small from small++.
_PRESET_SIZES = ("hidden_size", "num_layers", "num_heads", "intermediate_size", "embedding_size")


def _preset_sizes(config: ElectraConfig) -> tuple[int, ...]:
    """``config``'s ``_PRESET_SIZES``, then its generator's hidden size and layers."""
    generator = config.generator_config()
    own = (getattr(config, name) for name in _PRESET_SIZES)
    return (*own, generator.hidden_size, generator.num_layers)


def _as_option(name: str) -> Any:
    """A field with the default of the :class:`FinetuneOptions` field of that name."""
    return field(default=FinetuneOptions.__dataclass_fields__[name].default)


@dataclass
class FinetuneSettings:
    """Everything that defines a fine-tuned model, saved as ``finetune.json``: the
    ``task`` (one of :data:`TASKS`), its ``labels`` (class or tag names, in output order),
    the optimizer settings used (``training``, for the record), the ``source`` directory
    the backbone came from, and the fields it shares with :class:`FinetuneOptions` (by
    name, meaning the same), whose defaults and, in :meth:`from_options`, values it takes.
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
