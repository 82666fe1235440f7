"""`hexfuse calibrate` says when a profile comes from the x86 HTP simulator and refuses to fit device
figures from it unless told --allow-simulator; rows are classed through the shared profile_rows map."""

from __future__ import annotations

import json


from hexfuse.cli import main
from hexfuse.graph_passes.cost import load_target
from hexfuse.graph_passes.cost.calibrate import fit_profile, simulator_evidence, synthesize_profile
from tests.cost.test_calibrate import QNN_CSV, TRUE, _model

# What a device run looks like: about 1 GHz of cycles per microsecond, HVX threads in use.
DEVICE_ROWS = """0,BACKEND,4,COUNT,BACKEND,ROOT,Number of HVX threads used
0,BACKEND,1200000,CYCLES,BACKEND,ROOT,Accelerator (execute) time (cycles)
0,BACKEND,1000,US,BACKEND,ROOT,Accelerator (execute) time
"""
SIMULATOR_ROWS = """0,BACKEND,0,COUNT,BACKEND,ROOT,Number of HVX threads used
0,BACKEND,676773,CYCLES,BACKEND,ROOT,Accelerator (execute) time (cycles)
0,BACKEND,4543,US,BACKEND,ROOT,Accelerator (execute) time
"""


def _profile(tmp_path, rows: str):
    model = _model(tmp_path / "m.onnx")
    text = synthesize_profile(model, load_target("sm8550").with_values(factors=TRUE))
    path = tmp_path / "p.csv"
    path.write_text(text + rows)
    return model, path


def test_simulator_evidence(tmp_path):
    sim = tmp_path / "sim.csv"
    sim.write_text(QNN_CSV)  # trimmed from a real simulator run: 596159 cycles in 35604 us
    assert "implied HTP clock 17 MHz" in simulator_evidence(sim)
    _, device = _profile(tmp_path, DEVICE_ROWS)
    assert simulator_evidence(device) is None
    _, sim2 = _profile(tmp_path, SIMULATOR_ROWS)
    reason = simulator_evidence(sim2)
    assert "149 MHz" in reason and "'Number of HVX threads used' is 0" in reason


def test_calibrate_refuses_a_simulator_profile(tmp_path, capsys):
    model, profile = _profile(tmp_path, SIMULATOR_ROWS)
    out = tmp_path / "t.json"
    assert main(["calibrate", str(profile), "--model", str(model), "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hexfuse: error: ") and "comes from the HTP simulator" in err[0]
    assert "--allow-simulator" in err[0] and not out.exists()


def test_allow_simulator_fits_and_labels_the_target(tmp_path, capsys):
    model, profile = _profile(tmp_path, SIMULATOR_ROWS)
    out = tmp_path / "t.json"
    assert main(["calibrate", str(profile), "--model", str(model), "-o", str(out), "--allow-simulator"]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "describes the simulator, not a device" in err
    assert "calibrated from SIMULATOR profile p.csv" in json.loads(out.read_text())["description"]


def test_device_profile_fits_without_warning(tmp_path, capsys):
    model, profile = _profile(tmp_path, DEVICE_ROWS)
    assert main(["calibrate", str(profile), "--model", str(model), "-o", str(tmp_path / "t.json")]) == 0
    err = capsys.readouterr().err
    assert "warning" not in err and "rows by engine: dma 2, matrix 3, vector 4" in err


def test_rows_by_engine_uses_the_shared_map(tmp_path):
    model, profile = _profile(tmp_path, DEVICE_ROWS)
    fit = fit_profile(profile, model, load_target("sm8550"))
    # conv0, dw0, mm0 on HMX; relu, sigmoid, softmax, add on HVX; Input/Output graph copies as DMA
    # (the Reshape is free: it has no cost row)
    assert fit.rows_by_engine == {"dma": 2, "matrix": 3, "vector": 4}
