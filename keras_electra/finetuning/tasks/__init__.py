"""Task definitions: how each task reads, encodes, models, scores and predicts.

This ``__init__`` is the registry (:func:`get_task`), the one module that imports the task
modules; each of those imports only :mod:`.base` (and the readers, metrics and models).

Examples:
    >>> task = get_task("classify")
    >>> task.name
    'classify'
    >>> tuple(TASKS) == ("classify", "regress", "tag", "qa")
    True
"""

from __future__ import annotations

from keras_electra.finetuning.settings import check_task
from keras_electra.finetuning.tasks.base import Arrays, Task, word_pieces
from keras_electra.finetuning.tasks.classify import (
    ENCODE_CHUNK,
    ClassifyTask,
    RegressTask,
    encode_pairs,
    natural_sort,
)
from keras_electra.finetuning.tasks.qa import QATask
from keras_electra.finetuning.tasks.tagging import TagTask

TASKS: dict[str, type[Task]] = {
    task.name: task for task in (ClassifyTask, RegressTask, TagTask, QATask)
}
"""Task name -> class; the names are :data:`keras_electra.settings.TASKS`, in order."""


def get_task(name: str) -> Task:
    """The task object for ``classify``, ``regress``, ``tag`` or ``qa``.

    Raises:
        ConfigError: for an unknown task name.
    """
    return TASKS[check_task(name)]()


__all__ = [
    "ENCODE_CHUNK",
    "TASKS",
    "Arrays",
    "ClassifyTask",
    "QATask",
    "RegressTask",
    "TagTask",
    "Task",
    "encode_pairs",
    "get_task",
    "natural_sort",
    "word_pieces",
]
