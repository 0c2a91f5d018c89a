"""Session fixtures of the interop suite: the corpus is written once, into a temporary folder."""

from __future__ import annotations

import pytest

from .corpus import Corpus, build_corpus


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return build_corpus(tmp_path_factory.mktemp("interop-corpus"))
