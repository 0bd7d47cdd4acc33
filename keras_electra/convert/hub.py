"""Released weights by name: ``hf:ORG/NAME`` fetched from the Hugging Face Hub.

``keras-electra convert --from hf hf:google/electra-small-discriminator`` (and its
``--generator``) reads a Hub model where it would read a local directory;
``pretrain --init hf:...`` and ``finetune --init hf:...`` start from one, converted once
into an init directory kept under the keras-electra cache
(``$KERAS_ELECTRA_CACHE/hub``, else ``~/.cache/keras_electra/hub``), keyed by the
model's commit.

The files come through ``huggingface_hub``'s own cache, so a model fetched once is read
offline afterwards (``HF_HUB_OFFLINE=1``), ``HF_ENDPOINT`` points at a mirror, and
``HF_TOKEN`` opens private models. What is read: ``config.json``, ``vocab.txt``,
``model.safetensors`` and, if there, ``tokenizer_config.json`` (its ``do_lower_case``).
A failure is one sentence naming the model and what to do.

Examples:
    >>> is_hub_id("hf:google/electra-small-discriminator"), is_hub_id("runs/mine")
    (True, False)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from keras_electra.convert.core import write_init_dir
from keras_electra.convert.hf import read_hf
from keras_electra.errors import ConfigError, InputDataError
from keras_electra.run_directory import RunDirectory

PREFIX = "hf:"
REQUIRED = ("config.json", "vocab.txt", "model.safetensors")
OPTIONAL = ("tokenizer_config.json",)


def is_hub_id(source: str | Path | None) -> bool:
    """Whether ``source`` names a Hub model (``hf:ORG/NAME``) rather than a path."""
    return isinstance(source, str) and source.startswith(PREFIX)


def cache_root() -> Path:
    """Where converted Hub models are kept: ``$KERAS_ELECTRA_CACHE/hub`` or
    ``~/.cache/keras_electra/hub``."""
    root = os.environ.get("KERAS_ELECTRA_CACHE") or os.path.join("~", ".cache", "keras_electra")
    return Path(root).expanduser() / "hub"


def fetch(model: str) -> Path:
    """The local snapshot directory of Hub model ``hf:ORG/NAME`` (downloaded if needed).

    Raises:
        ConfigError: for a malformed id.
        InputDataError: the model or one of its files cannot be had (one sentence).
    """
    repo_id = _repo_id(model)
    try:
        from huggingface_hub import constants, hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )
    except ImportError:  # pragma: no cover - a dependency of the package
        raise InputDataError(
            f"Fetching '{model}' needs huggingface_hub: pip install huggingface_hub."
        ) from None
    endpoint = os.environ.get("HF_ENDPOINT")  # read now, not when huggingface_hub loaded
    cache = os.environ.get("HF_HUB_CACHE")
    for name in REQUIRED + OPTIONAL:  # the first sets `folder` or raises
        try:
            path = hf_hub_download(repo_id, name, endpoint=endpoint, cache_dir=cache)
        except EntryNotFoundError as error:  # LocalEntryNotFoundError too: offline, not cached
            if name in OPTIONAL:  # a model without it (offline: the required files are here)
                continue
            if not isinstance(error, LocalEntryNotFoundError):
                raise InputDataError(
                    f"Hugging Face model '{repo_id}' has no {name}; keras-electra reads ELECTRA "
                    f"models with {', '.join(REQUIRED)}."
                ) from None
            raise InputDataError(
                f"Could not fetch Hugging Face model '{repo_id}': the Hub is not reachable "
                f"(or HF_HUB_OFFLINE is set) and its {name} is not in the cache "
                f"'{cache or constants.HF_HUB_CACHE}'; connect once, or convert a local copy with "
                "`keras-electra convert --from hf DIR`."
            ) from None
        except RepositoryNotFoundError:
            raise InputDataError(
                f"Hugging Face has no model '{repo_id}' (or it is private: set HF_TOKEN); "
                "check the name at huggingface.co."
            ) from None
        except (HfHubHTTPError, OSError) as error:
            raise InputDataError(
                f"Could not fetch {name} of Hugging Face model '{repo_id}' "
                f"({_reason(error)}); retry, or convert a local copy with "
                "`keras-electra convert --from hf DIR`."
            ) from None
        folder = Path(path).parent
    return folder


def init_directory(model: str) -> Path:
    """An init directory (``pretrain --init``, ``finetune --init``) for Hub model
    ``hf:ORG/NAME``: its discriminator converted once (the generator starts fresh; for
    the released generator too, use ``keras-electra convert --from hf ... --generator``)."""
    snapshot = fetch(model)
    target = cache_root() / _repo_id(model).replace("/", "--") / snapshot.name
    if RunDirectory(target).has_config():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=".converting-", dir=target.parent))
    try:
        # convert(snapshot, ..., "hf") through its reader and writer: the package
        # imports this module (for hf: sources), so this module does not import it.
        write_init_dir(read_hf(snapshot), partial / "init")
        try:
            os.replace(partial / "init", target)
        except OSError:  # another process converted it first
            if not RunDirectory(target).has_config():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def local_source(source: str | Path) -> str | Path:
    """``source`` itself, or for ``hf:ORG/NAME`` the fetched snapshot directory."""
    return fetch(source) if is_hub_id(source) else source


def local_init(init: str | Path | None) -> str | Path | None:
    """``init`` itself, or for ``hf:ORG/NAME`` its converted init directory."""
    return str(init_directory(init)) if is_hub_id(init) else init


def _repo_id(model: str) -> str:
    repo_id = model[len(PREFIX) :] if model.startswith(PREFIX) else model
    parts = repo_id.split("/")
    if len(parts) > 2 or not all(parts) or any(p in (".", "..") for p in parts):
        raise ConfigError(
            f"'{model}' is not a Hugging Face model id; write hf:ORG/NAME, such as "
            "hf:google/electra-small-discriminator."
        )
    return repo_id


def _reason(error: Exception) -> str:
    status = getattr(getattr(error, "response", None), "status_code", None)
    if status is not None:
        return f"HTTP {status}"
    return str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
