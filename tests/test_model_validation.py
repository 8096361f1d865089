"""results/reference/model-validation.md is what the model gives now, and every profile constant has
a source of a known kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from commbench.cli import main
from commbench.jobs.profile import load_profile
from commbench.kernels.model.fabric_table import FABRIC_CONSTANTS
from commbench.model import validation as model_validation

ROOT = Path(__file__).resolve().parent.parent
SOURCE_KINDS = ("spec:", "published:", "measured:", "estimate:")


def test_committed_validation_table_matches_the_model():
    doc = ROOT / "results" / "reference" / "model-validation.md"
    assert doc.read_text() == model_validation.render(), (
        "results/reference/model-validation.md is out of date: "
        "commbench model-validation --out results/reference/model-validation.md"
    )


@pytest.mark.parametrize("name", [p.stem for p in sorted((ROOT / "jobs/systems").glob("*.toml"))])
def test_every_fabric_constant_names_its_source(name):
    fab = load_profile(name).fabric
    required = ["scaleup_GBps", "scaleup_peer_GBps", "scaleup_latency_us", "scaleout_GBps",
                "scaleout_latency_us", "nics_per_node", "stage_cost_us"]  # fmt: skip
    assert set(required) <= set(FABRIC_CONSTANTS)
    for key in (k for k in FABRIC_CONSTANTS if getattr(fab, k) is not None):
        source = fab.sources.get(key, "")
        assert source.startswith(SOURCE_KINDS), f"{name}: [fabric.sources] {key} = {source!r}"


def test_check_flags_a_stale_copy(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(model_validation, "render", lambda: "new\n")
    stale = tmp_path / "v.md"
    stale.write_text("old\n")
    assert main(["model-validation", "--check", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
