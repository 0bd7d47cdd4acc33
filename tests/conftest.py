import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pathlib  # noqa: E402

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "data" / "sample" / "shakespeare.txt"
SAMPLE_VALID = REPO / "data" / "sample" / "shakespeare_valid.txt"


@pytest.fixture(scope="session")
def sample_corpus() -> pathlib.Path:
    return SAMPLE_CORPUS
