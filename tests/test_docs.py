"""The documentation: the site builds in strict mode (no broken link, no docstring that
disagrees with its signature), its command-line reference lists every flag, and the
README stays a user's guide."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from keras_electra.cli import build_parser, reference_markdown

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def _flags(command: str) -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if hasattr(a, "choices") and isinstance(a.choices, dict))
    return [
        flag
        for action in sub.choices[command]._actions
        for flag in action.option_strings
        if flag not in ("-h", "--help")
    ]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if shutil.which("mkdocs", path=os.path.dirname(sys.executable)) is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def test_the_site_builds_strictly_with_every_page_and_the_api_reference(site):
    for page in ("index.html", "installation/index.html", "cli/index.html", "api/index.html"):
        assert (site / page).is_file(), page
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert "ElectraPretrainer" in api and "pretraining_dataset" in api


def test_the_cli_reference_lists_every_pretrain_and_finetune_flag(site):
    page = (site / "cli" / "index.html").read_text(encoding="utf-8")
    for command in ("pretrain", "finetune", "export", "convert"):
        missing = [flag for flag in _flags(command) if flag not in page]
        assert not missing, (command, missing)


def test_the_reference_is_generated_from_the_parser():
    text = reference_markdown()
    assert len(_flags("pretrain")) > 25
    for flag in _flags("pretrain"):
        assert f"`{flag}" in text, flag


def test_the_readme_is_a_users_guide():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, len(lines)
    assert lines[0] == "# keras-electra"
    head = "\n".join(lines[:12])
    assert "make demo" in head and "make test" in head  # the fresh-machine commands first
    commit = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
    hashes = [line for line in lines if commit.search(line)]
    assert not hashes, hashes


def test_the_installation_pages_extras_table_names_every_package_of_each_extra():
    # The `dev` row left out nbclient, nbformat, ipykernel and scikit-learn, which
    # `pip install -e ".[dev]"` installs for the notebook test and the benchmark's probes.
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    page = (REPO / "docs" / "installation.md").read_text(encoding="utf-8")
    table = page.split("### Extras", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([a-z]+)` \| (.*?) \|", table, re.M))
    assert set(rows) == set(extras), rows
    docs_packages = {re.split(r"[\[<>=]", p)[0] for p in extras["docs"]}
    for extra, requirements in extras.items():
        for requirement in requirements:
            name = re.split(r"[\[<>=]", requirement)[0]
            if extra == "dev" and name in docs_packages and "the `docs` packages" in rows[extra]:
                continue
            assert name in rows[extra], f"{name} of the {extra} extra is not in its row"


def test_every_python_block_of_the_pages_is_run_by_a_test_or_says_why_not():
    from doc_snippets import RUN_BY, SKIPPED, pages, python_blocks

    found = {
        (str(page.relative_to(REPO)), heading)
        for page in pages()
        for heading, _ in python_blocks(page)
    }
    assert found - set(RUN_BY) - set(SKIPPED) == set(), "a new block: run it in a test (RUN_BY)"
    assert set(RUN_BY) | set(SKIPPED) <= found, "RUN_BY or SKIPPED names a block that is gone"
    for (page, heading), test_file in RUN_BY.items():
        # The test that runs it names the heading (as snippet()'s argument or a constant).
        assert heading in (REPO / "tests" / test_file).read_text(encoding="utf-8"), (
            f"{test_file} does not run {page}'s block under {heading!r}"
        )
