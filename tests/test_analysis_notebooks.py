"""The analysis notebooks run top to bottom (nbclient) on small result files."""

from __future__ import annotations

import nbformat
import pytest

from commbench.analysis.notebooks import (
    NOTEBOOK_DIR,
    NOTEBOOKS,
    execute_notebook,
    inject_parameters,
)
from tests.test_analysis_data import small_results


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    return small_results(tmp_path_factory.mktemp("nb-results"))


def test_every_notebook_is_thin_and_parameterised():
    for name in NOTEBOOKS:
        nb = nbformat.read(NOTEBOOK_DIR / f"{name}.ipynb", as_version=4)
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1 and "RESULTS =" in tagged[0].source and "OUT =" in tagged[0].source
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.get("outputs") for c in code), f"{name}: commit notebooks without outputs"
        assert sum(len(c.source.splitlines()) for c in code) < 60, (
            f"{name}: keep logic in analysis/"
        )


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_end_to_end(name, results_dir, tmp_path):
    out = tmp_path / "figures"
    nb = execute_notebook(
        NOTEBOOK_DIR / f"{name}.ipynb",
        {"RESULTS": [str(results_dir)], "OUT": str(out)},
        output=tmp_path / f"{name}.ipynb",
    )
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert images, f"{name} displayed no figure"
    assert "drawn" in "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert list(out.glob("*.png")) and (tmp_path / f"{name}.ipynb").exists()


def test_parameters_need_a_parameters_cell_and_literals():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    with pytest.raises(ValueError, match="no cell tagged 'parameters'"):
        inject_parameters(nb, {"RESULTS": ["a"]})
    with pytest.raises(ValueError, match="use str, number, bool, None or lists"):
        inject_parameters(nb, {"RESULTS": object()})
