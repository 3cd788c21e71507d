"""notebooks/first_steps.ipynb teaches diagnose -> echo -> prune: it runs (on tiny sizes) and
shows each step's result, and the copy in the repository carries the outputs of a full run."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_tutorial_runs_every_step_and_prints_its_results(execute_notebook, data_dir):
    outputs = execute_notebook("first_steps", FIRST_STEPS_QUICK=1, FIRST_STEPS_DATA_DIR=data_dir)
    assert not [output for output in outputs if output.get("output_type") == "error"]
    text = "".join(output.get("text", "") for output in outputs)
    assert "R = " in text and "input-bound" in text  # the diagnosis and its verdict
    assert "AutoEcho" in text and "echo factor after each epoch" in text
    assert "pruned" in text and "of the steps" in text


def test_the_saved_notebook_shows_a_full_run():
    notebook = json.loads((ROOT / "notebooks" / "first_steps.ipynb").read_text())
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert all(cell["outputs"] for cell in code), "re-run it with its outputs saved"
    text = "".join("".join(o.get("text", "")) for cell in code for o in cell["outputs"])
    assert "(40000, 40, 1)" in text  # NUM_TRAIN = 40,000: not the QUICK sizes
