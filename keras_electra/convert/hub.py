"""Released weights by name: ``hf:ORG/NAME`` fetched from the Hugging Face Hub.

``convert --from hf`` reads a Hub model where it would read a directory; ``--init hf:...``
converts its discriminator once into the keras-electra cache. What is read, and from
where (``model.safetensors`` on main, else on the Hub's safetensors conversion pull
request, else ``tf_model.h5``; never ``pytorch_model.bin``): docs/checkpoints.md,
"Released weights in one step".

Examples:
    >>> is_hub_id("hf:google/electra-small-discriminator"), is_hub_id("runs/mine")
    (True, False)
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from keras_electra.convert.core import write_init_dir
from keras_electra.convert.hf import TF_WEIGHTS_FILE as TF_WEIGHTS
from keras_electra.convert.hf import TOKENIZER_FILE, VOCAB_FILE, read_hf
from keras_electra.convert.hf import WEIGHTS_FILE as SAFETENSORS
from keras_electra.errors import ConfigError, InputDataError, first_line
from keras_electra.hub_ids import PREFIX, is_hub_id
from keras_electra.hub_ids import repo_id as _repo_id
from keras_electra.run_directory import RunDirectory

MAIN = "main"
CONFIG = "config.json"
# The vocabulary: vocab.txt, else the tokenizer.json transformers 5 saves in its place.
VOCABULARIES = (VOCAB_FILE, TOKENIZER_FILE)
OPTIONAL = ("tokenizer_config.json",)
# Statuses huggingface_hub asks again for (a busy or failing server): worth a retry later.
TRANSIENT = (408, 429, 500, 502, 503, 504)
PICKLE = "pytorch_model.bin"
# The Hub's safetensors conversion pull request (its author checked: anyone can open one).
CONVERSION_TITLE = "Adding `safetensors` variant of this model"
CONVERSION_AUTHOR = "SFconvertbot"


@dataclass(frozen=True)
class Snapshot:
    """A Hub model's files on this machine: ``folder`` (huggingface_hub's snapshot of one
    commit, named by it) holds the config, vocabulary and ``weights``, read from
    ``revision`` (``main`` or a conversion pull request's ``refs/pr/N``)."""

    model: str
    folder: Path
    weights: str
    revision: str

    def describe(self) -> str:
        """Which file was read, from where: ``model.safetensors from its main branch
        (commit 0123456789ab)``."""
        where = (
            "its main branch"
            if self.revision == MAIN
            else f"its safetensors conversion pull request {self.revision}"
        )
        return f"{self.weights} from {where} (commit {self.folder.name[:12]})"


def cache_root() -> Path:
    """Where converted Hub models are kept: ``$KERAS_ELECTRA_CACHE/hub`` or
    ``~/.cache/keras_electra/hub``."""
    root = os.environ.get("KERAS_ELECTRA_CACHE") or os.path.join("~", ".cache", "keras_electra")
    return Path(root).expanduser() / "hub"


def fetch(model: str) -> Snapshot:
    """Hub model ``hf:ORG/NAME``'s files on this machine (downloaded if needed), the
    weights from the first place that has them (the module docstring's order).

    Raises:
        ConfigError: for a malformed id.
        InputDataError: the model or its files cannot be had (one sentence).
    """
    with _quiet_retries():
        return _fetch(model)


@contextmanager
def _quiet_retries():
    """huggingface_hub's own warnings muted: an unreachable Hub printed a line per retry
    ("'[Errno 111] Connection refused' thrown while requesting HEAD ...", "Retrying in 1s
    [Retry 1/5].", ...) before the one sentence that says what to do."""
    try:  # its import sets its level once, which would undo ours
        import huggingface_hub.utils.logging  # noqa: F401
    except ImportError:  # pragma: no cover - _Hub says how to install it
        pass
    hub_logger = logging.getLogger("huggingface_hub")
    level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        hub_logger.setLevel(level)


def _fetch(model: str) -> Snapshot:
    hub = _Hub(model)
    hub.files(MAIN)  # the config and vocabulary, or the sentence saying why not
    weights = hub.file(MAIN, SAFETENSORS)
    if weights is not None:
        return Snapshot(model, weights.parent, SAFETENSORS, MAIN)
    for revision in hub.conversion_revisions():  # every file from that revision
        weights = hub.file(revision, SAFETENSORS)
        if weights is not None and hub.files(revision, required=False) is not None:
            return Snapshot(model, weights.parent, SAFETENSORS, revision)
    weights = hub.file(MAIN, TF_WEIGHTS)
    if weights is not None:
        return Snapshot(model, weights.parent, TF_WEIGHTS, MAIN)
    raise hub.no_weights()


def init_directory(model: str) -> Path:
    """An init directory (``pretrain --init``, ``finetune --init``) for Hub model
    ``hf:ORG/NAME``: its discriminator converted once (the generator starts fresh; for
    the released generator too, use ``keras-electra convert --from hf ... --generator``)."""
    snapshot = fetch(model)
    _check_discriminator(model, snapshot.folder)
    target = cache_root() / _repo_id(model).replace("/", "--") / snapshot.folder.name
    if RunDirectory(target).has_config():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=".converting-", dir=target.parent))
    try:
        # convert(snapshot, ..., "hf") through its reader and writer: the package
        # imports this module (for hf: sources), so this module does not import it.
        converted = read_hf(snapshot.folder)
        converted.notes.append(_note(snapshot))
        write_init_dir(converted, partial / "init")
        try:
            os.replace(partial / "init", target)
        except OSError:  # another process converted it first
            if not RunDirectory(target).has_config():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    print(f"Converted {model}: {snapshot.describe()}, into {target}", flush=True)
    return target


def local_source(source: str | Path) -> tuple[str | Path, list[str]]:
    """``source`` itself, or for ``hf:ORG/NAME`` the fetched snapshot directory; with the
    notes to report (for a Hub model: which weights file was read, from where)."""
    if not is_hub_id(source):
        return source, []
    snapshot = fetch(source)
    return snapshot.folder, [_note(snapshot)]


def local_init(init: str | Path | None) -> str | Path | None:
    """``init`` itself, or for ``hf:ORG/NAME`` its converted init directory."""
    return str(init_directory(init)) if is_hub_id(init) else init


class _Hub:
    """One Hub model through huggingface_hub, every failure a sentence: its files by
    revision (None where a file is absent, or cannot be had now and is not cached) and
    its conversion pull requests."""

    def __init__(self, model: str):
        self.model, self.repo_id = model, _repo_id(model)
        self.endpoint = os.environ.get("HF_ENDPOINT")  # read now, not when huggingface_hub loaded
        self.cache = os.environ.get("HF_HUB_CACHE")
        self.unreachable: str | None = None  # a needed file that could not be had, if any
        self._unreached: set[str] = set()  # every file that could not be had now
        self._answers: bool | None = None  # whether the Hub answered, once asked
        try:
            import huggingface_hub  # noqa: F401
        except ImportError:  # pragma: no cover - a dependency of the package
            raise InputDataError(
                f"Fetching '{model}' needs huggingface_hub: pip install huggingface_hub."
            ) from None

    def files(self, revision: str, required: bool = True) -> Path | None:
        """The folder holding the config and vocabulary (``vocab.txt``, else
        ``tokenizer.json``) at ``revision`` (None when ``required`` is off and one is
        missing)."""
        config = self.file(revision, CONFIG)
        if config is None:
            return self._lacking(CONFIG, {CONFIG}, required)
        for name in VOCABULARIES:  # the first the model has
            vocabulary = self.file(revision, name, needed=False)
            if vocabulary is not None:
                break
        if vocabulary is None:
            return self._lacking(" or ".join(VOCABULARIES), set(VOCABULARIES), required)
        for name in OPTIONAL:
            self.file(revision, name, needed=False)
        return config.parent

    def _lacking(self, said: str, names: set[str], required: bool) -> None:
        """None, or (``required``) the sentence for a model without the file(s) ``names``
        (``said`` in words): not in the cache of an unreachable Hub, or not in the model."""
        if not required:
            return None
        if self._unreached & names:
            raise self._offline(said)
        raise InputDataError(
            f"Hugging Face model '{self.repo_id}' has no {said}; keras-electra reads ELECTRA "
            f"models with {CONFIG}, {VOCAB_FILE} (or a WordPiece {TOKENIZER_FILE}) and "
            f"{SAFETENSORS} or {TF_WEIGHTS}."
        )

    def file(self, revision: str, name: str, needed: bool = True) -> Path | None:
        """The local path of file ``name`` at ``revision``, or None: the model has no such
        file, or it cannot be had now (offline, or nothing answers) and is not cached
        (remembered; as ``unreachable`` too when it is ``needed``).

        Raises:
            InputDataError: the server answered for this file, but with an HTTP error
                (after huggingface_hub's retries) or not as a Hub does (``HF_ENDPOINT``
                pointing at another server): the weights are then not looked for in
                another file, which a passing server error would otherwise make the
                conversion read.
        """
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        where = dict(revision=revision, endpoint=self.endpoint, cache_dir=self.cache)
        try:
            cached_only = not self.answers()
            return Path(hf_hub_download(self.repo_id, name, local_files_only=cached_only, **where))
        except LocalEntryNotFoundError as error:  # not cached, and the Hub did not give it
            answer = _server_answer(error)
            if answer is not None:  # a server answered: not offline
                raise self._answered(name, answer) from None
            self._unreached.add(name)
            if needed:
                self.unreachable = self.unreachable or name
            return None
        except EntryNotFoundError:
            return None
        except RepositoryNotFoundError:
            raise InputDataError(
                f"Hugging Face has no model '{self.repo_id}' (or it is private: set HF_TOKEN); "
                "check the name at huggingface.co."
            ) from None
        except RevisionNotFoundError:
            if revision != MAIN:  # a pull request removed since it was listed
                return None
            raise InputDataError(
                f"Hugging Face model '{self.repo_id}' has no main branch; check the name at "
                "huggingface.co."
            ) from None
        except _network_errors() as error:  # a server error, or a connection dropped
            raise InputDataError(
                f"Could not fetch {name} of Hugging Face model '{self.repo_id}' "
                f"({_reason(error)}); retry, or convert a local copy with "
                "`keras-electra convert --from hf DIR`."
            ) from None

    def answers(self) -> bool:
        """Whether the Hub answers at all, asked once without retries. huggingface_hub
        retries a file it has not cached five times (23 s) when nothing answers; a Hub
        that does not answer here is read from the cache alone (its own fallback), so the
        sentence comes at once. An HTTP error is an answer: the download then retries a
        busy server as huggingface_hub does."""
        if self._answers is None:
            from huggingface_hub import get_hf_file_metadata, hf_hub_url
            from huggingface_hub.errors import HfHubHTTPError

            url = hf_hub_url(self.repo_id, CONFIG, revision=MAIN, endpoint=self.endpoint)
            try:
                get_hf_file_metadata(url)
                self._answers = True
            except HfHubHTTPError:  # 404, 401, 5xx: the download says what it means
                self._answers = True
            except _network_errors():  # refused, no such host, timed out, offline mode
                self._answers = False
        return self._answers

    def conversion_revisions(self) -> list[str]:
        """The conversion pull requests' revisions (``refs/pr/N``), newest first: listed
        by the Hub, else (offline) found among the cached revisions."""
        from huggingface_hub import HfApi

        if not self.answers():
            return self._cached_conversions()
        try:
            listed = HfApi(endpoint=self.endpoint).get_repo_discussions(
                self.repo_id, discussion_type="pull_request", discussion_status="open"
            )
            pulls = [
                d.git_reference
                for d in listed
                if d.title == CONVERSION_TITLE and d.author == CONVERSION_AUTHOR
            ]
        except _network_errors() as error:  # offline or unreachable: what an earlier fetch cached
            answer = _server_answer(error)
            if answer is not None:  # an HTTP error: not a reason to read another weights file
                said = "the list of pull requests"
                raise self._answered(said, answer, asked_again=False) from None
            return self._cached_conversions()
        if not pulls:
            return []
        pulls.sort(key=lambda ref: -int(ref.rsplit("/", 1)[-1]))
        main = self._etag(MAIN, PICKLE)  # converted from the weights main has now, or stale
        return [ref for ref in pulls if main is not None and self._etag(ref, PICKLE) == main]

    def no_weights(self) -> InputDataError:
        """The sentence for a model with no weights keras-electra reads."""
        if self.unreachable:
            return self._offline(self.unreachable)
        places = (
            f"no {SAFETENSORS} (on its main branch or a safetensors conversion pull request) "
            f"and no {TF_WEIGHTS}"
        )
        if self._etag(MAIN, PICKLE) is not None:
            return InputDataError(
                f"Hugging Face model '{self.repo_id}' has its weights only as {PICKLE}, a "
                f"pickle keras-electra does not open ({places}); load it with transformers and "
                "save_pretrained(DIR), which writes model.safetensors, then pass DIR."
            )
        return InputDataError(
            f"Hugging Face model '{self.repo_id}' has {places}; keras-electra reads ELECTRA "
            "weights from those files."
        )

    def _etag(self, revision: str, name: str) -> str | None:
        """The ETag of file ``name`` at ``revision`` (an LFS file's: its SHA-256), or None
        when there is no such file or nothing answers.

        Raises:
            InputDataError: the server answered with another HTTP error (a 5xx, 401): the
                conversion pull requests cannot be checked, and ``tf_model.h5`` is not read
                in their place.
        """
        from huggingface_hub import get_hf_file_metadata, hf_hub_url

        url = hf_hub_url(self.repo_id, name, revision=revision, endpoint=self.endpoint)
        try:
            return get_hf_file_metadata(url).etag
        except _network_errors() as error:
            answer = _server_answer(error)
            status = getattr(getattr(answer, "response", None), "status_code", None)
            if answer is None or status == 404:
                return None
            raise self._answered(name, answer, asked_again=False) from None

    def _cached_conversions(self) -> list[str]:
        from huggingface_hub import scan_cache_dir
        from huggingface_hub.utils import CacheNotFound

        try:
            repos = scan_cache_dir(self.cache).repos
        except CacheNotFound:
            return []
        refs = {
            ref
            for repo in repos
            if repo.repo_id == self.repo_id and repo.repo_type == "model"
            for revision in repo.revisions
            if SAFETENSORS in {f.file_name for f in revision.files}
            for ref in revision.refs
            if ref.startswith("refs/pr/")
        }
        return sorted(refs, key=lambda ref: -int(ref.rsplit("/", 1)[-1]))

    def _answered(self, name: str, answer: Exception, asked_again: bool = True) -> InputDataError:
        """The sentence for a file the server answered with an HTTP error, or not as a
        Hugging Face Hub does (huggingface_hub's ``FileMetadataError``: no
        ``X-Repo-Commit`` or ``ETag`` header, as from a plain file server);
        ``asked_again``: whether huggingface_hub retried a transient status (downloads do)."""
        from huggingface_hub import constants

        what = f"Could not fetch {name} of Hugging Face model '{self.repo_id}'"
        status = getattr(getattr(answer, "response", None), "status_code", None)
        if status is None:  # a FileMetadataError
            missing = [h for h in ("X-Repo-Commit", "ETag") if h in str(answer)]
            why = f"no {missing[0]} header in its answer" if missing else first_line(answer, 120)
            if self.endpoint:
                return InputDataError(
                    f"{what}: HF_ENDPOINT '{self.endpoint}' does not seem to be served by a "
                    f"Hugging Face Hub endpoint ({why}); point HF_ENDPOINT at the Hub or a "
                    "mirror of it, or unset it."
                )
            return InputDataError(
                f"{what}: '{constants.ENDPOINT}' answered, but not as a Hugging Face Hub "
                f"endpoint does ({why}); check your proxy and firewall settings, or set "
                "HF_ENDPOINT to a mirror of the Hub."
            )
        if status in TRANSIENT:
            again = " (also when asked again)" if asked_again else ""
            said, fix = f"HTTP {status} for it{again}", "retry later"
        else:
            said, fix = f"HTTP {status} for it", "check the model's name and your access (HF_TOKEN)"
        return InputDataError(
            f"{what}: the server answered {said}; {fix}, or convert a local copy with "
            "`keras-electra convert --from hf DIR`."
        )

    def _offline(self, name: str) -> InputDataError:
        from huggingface_hub import constants

        return InputDataError(
            f"Could not fetch Hugging Face model '{self.repo_id}': the Hub is not reachable "
            f"(or HF_HUB_OFFLINE is set) and its {name} is not in the cache "
            f"'{self.cache or constants.HF_HUB_CACHE}'; connect once, or convert a local copy "
            "with `keras-electra convert --from hf DIR`."
        )


def _network_errors() -> tuple[type[BaseException], ...]:
    """What a Hub request raises when it cannot be answered: huggingface_hub's HTTP error,
    ``OSError`` (offline mode, connections) and its HTTP library's own error (requests',
    httpx's or httpx2's, by huggingface_hub's version: the bases of its HTTP error)."""
    from huggingface_hub.errors import HfHubHTTPError

    bases = [b for b in HfHubHTTPError.__mro__[1:] if b not in (Exception, BaseException, object)]
    return (HfHubHTTPError, OSError, *bases)


def _server_answer(error: BaseException) -> Exception | None:
    """The error behind huggingface_hub's ``LocalEntryNotFoundError`` (a file neither
    fetched nor cached) when a server did answer, in its ``__cause__``/``__context__``
    chain: an ``HfHubHTTPError`` (an HTTP error status, after its retries) or a
    ``FileMetadataError`` (an answer without the Hub's headers). None when nothing
    answered: offline mode, a refused or dropped connection, a timeout."""
    from huggingface_hub.errors import FileMetadataError, HfHubHTTPError

    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, FileMetadataError) or (
            isinstance(current, HfHubHTTPError) and getattr(current, "response", None) is not None
        ):
            return current
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None


def _check_discriminator(model: str, folder: Path) -> None:
    """``--init`` starts from a discriminator: a generator repository is one sentence."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # read_hf names the problem
    if "ElectraForMaskedLM" in (config.get("architectures") or []):
        partner = model.replace("-generator", "-discriminator")
        partner = partner if partner != model else "its discriminator"
        raise ConfigError(
            f"'{model}' is an ELECTRA generator (ElectraForMaskedLM) and --init starts from a "
            f"discriminator; pass {partner}, or convert both with `keras-electra convert "
            f"--from hf {partner if partner.startswith(PREFIX) else 'DISCRIMINATOR'} "
            f"--generator {model} --output DIR` and pass --init DIR."
        )


def _note(snapshot: Snapshot) -> str:
    return f"Read {snapshot.model}: {snapshot.describe()}."


def _reason(error: Exception) -> str:
    status = getattr(getattr(error, "response", None), "status_code", None)
    if status is not None:
        return f"HTTP {status}"
    return first_line(error)
