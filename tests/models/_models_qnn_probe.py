"""Run the QDQ models of models/catalog.json on the QNN HTP backend (the x86 simulator of onnxruntime-qnn)
and print, as JSON on the last stdout line, which EP ran each node and whether outputs are finite.

Run in a subprocess by test_model_files.py, so that a native crash in the QNN EP cannot take the pytest
process down.  Usage: python _qnn_probe.py FILE [FILE ...]   (file names relative to models/)
"""

from __future__ import annotations

import json
import sys

import numpy as np
import onnxruntime as ort

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _models_testlib import MODELS_DIR, load_catalog, make_feeds  # noqa: E402


def main(files: list[str]) -> None:
    import onnxruntime_qnn

    ort.register_execution_provider_library("QNNExecutionProvider", onnxruntime_qnn.get_library_path())
    devs = [d for d in ort.get_ep_devices() if d.ep_name == "QNNExecutionProvider"]
    if not devs:
        raise SystemExit("no QNNExecutionProvider device after registering the plugin")
    entries = {e["file"]: e for e in load_catalog()["models"]}
    result = {}
    for f in files:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        so.add_provider_for_devices(devs, {"backend_type": "htp"})
        try:
            sess = ort.InferenceSession(str(MODELS_DIR / f), so)
        except Exception as e:  # reported, asserted on by the test
            result[f] = {"error": str(e)[:500]}
            continue
        assign = [
            {"ep": sub.ep_name, "op_type": n.op_type, "name": n.name}
            for sub in sess.get_provider_graph_assignment_info()
            for n in sub.get_nodes()
        ]
        outs = sess.run(None, make_feeds(entries[f], seed=7))
        result[f] = {"assignment": assign, "finite": bool(all(np.isfinite(o).all() for o in outs))}
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
