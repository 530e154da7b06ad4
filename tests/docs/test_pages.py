"""The documentation pages hold what they claim: runnable examples, the real schema."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

import regimes

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(DOCS.glob("*.md"))


def _examples(page: Path) -> doctest.DocTest:
    return doctest.DocTestParser().get_doctest(page.read_text(), {}, page.name, str(page), 0)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_examples_run(page, run_doctests):
    run_doctests([_examples(page)])


def test_the_home_page_has_examples():
    assert len(_examples(DOCS / "index.md").examples) >= 4


def test_data_page_lists_every_trial_column_with_its_type():
    rows = re.findall(r"^\| \**`(\w+)`\** \| (\w+) \|", (DOCS / "data.md").read_text(), re.M)
    documented = dict(rows)
    assert documented == {name: str(dtype) for name, dtype in regimes.TRIAL_SCHEMA.items()}


def test_data_page_marks_the_required_columns():
    required = re.findall(r"^\| \*\*`(\w+)`\*\* \|", (DOCS / "data.md").read_text(), re.M)
    assert set(required) == set(regimes.data.schema.REQUIRED_COLUMNS)


def test_the_real_runs_page_gives_each_committed_runs_rows_as_load_returns_them():
    text = (DOCS / "runs.md").read_text()
    rows = re.findall(r"^\| `([\w-]+)` \| [^|]+ \| (\d+) \| (\d+) \|", text, re.M)
    committed = sorted(p.name for p in (DOCS.parent / "examples" / "data").iterdir() if p.is_dir())
    assert sorted(name for name, _, _ in rows) == committed
    for name, loaded, measured in rows:
        trials = regimes.load(DOCS.parent / "examples" / "data" / name)
        assert (trials.height, int((~trials.get_column("warmup")).sum())) == (
            int(loaded),
            int(measured),
        ), name
