"""User-facing errors.

Every error a user can cause (a bad path, bad text, a wrong config) is raised as
an :class:`ElectraError` whose message is one sentence naming the problem and the
fix. The command line prints that sentence and exits with status 2 instead of a
traceback.
"""


class ElectraError(Exception):
    """An error caused by user input, with a one-sentence message."""


class InputDataError(ElectraError):
    """A corpus, vocabulary or data file cannot be used."""


class ConfigError(ElectraError):
    """A configuration is invalid or does not match a checkpoint."""
