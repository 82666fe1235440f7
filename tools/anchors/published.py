"""The published latencies the cost model is compared with: ``tools/anchors/published.csv``.

Qualcomm's model zoo (https://github.com/quic/ai-hub-models) keeps per model a ``perf.yaml``:

    precisions: {float|w8a8: {components: {<Name>: {performance_metrics: {<device>: {<runtime>: {
        job_id, job_status, inference_time_milliseconds, tool_versions: {qairt, onnx_runtime}}}}}}}}

``runtime`` is ``onnx`` (ONNX Runtime + QNN EP: what hexfuse users run), ``qnn_dlc`` or ``tflite``.
One row per (model, chipset, precision): the ``onnx`` figure, else the ``qnn_dlc`` one (column
``runtime`` says which, ``note`` says why). A figure counts only when the job ran every layer on the NPU
(``layer_counts.npu == layer_counts.total``): e.g. ResNet18 w8a8 under ORT on the S23 ran 9 of 87 layers
on the CPU and took 20 ms against 1.2 ms in float; such a figure times the CPU fallback, not the NPU. Each chipset's figure comes from the newest commit of the
model's perf.yaml that lists that phone (Galaxy S23 left the file in September 2025), and the row names
that commit. Only the figures are taken; no code of that repository.

    python -m hexfuse.tools.anchors.published /path/to/ai-hub-models.git -o tools/anchors/published.csv
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from hexfuse.graph_passes.cost.calibrate import read_published
from hexfuse.graph_passes.errors import HexfuseError

TABLE = Path(__file__).with_name("published.csv")
REPOSITORY = "https://github.com/quic/ai-hub-models"
DEVICES = {"sm8550": "Samsung Galaxy S23", "sm8650": "Samsung Galaxy S24", "sm8750": "Samsung Galaxy S25"}
RUNTIMES = ("onnx", "qnn_dlc")  # preferred first
PRECISIONS = ("float", "w8a8")
# ai-hub-models id -> torchvision builder the zoo wraps (its model.py), all at 1x3x224x224 (ImagenetClassifier)
MODELS: dict[str, str] = json.loads((Path(__file__).with_name("architectures.json")).read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Published:
    model: str  # ai-hub-models id
    arch: str  # torchvision builder
    device: str
    chipset: str  # hexfuse target name
    runtime: str  # onnx | qnn_dlc
    precision: str  # float | w8a8
    milliseconds: float
    job_id: str  # Qualcomm AI Hub profiling job
    qairt: str
    onnx_runtime: str
    npu_layers: int  # layers the job ran on the NPU, of ...
    layers: int  # ... all its layers (equal in every row: partly-CPU figures are left out)
    commit: str  # ai-hub-models commit the figure was read at
    note: str = ""


COLUMNS = [f.name for f in fields(Published)]


def read_table(path: str | Path = TABLE) -> list[Published]:
    """The rows of a published table (this repository's, or a user's own in the same columns)."""
    rows = []
    for raw in read_published(path):  # checks the required columns and milliseconds
        values = {c: raw.get(c, "") for c in COLUMNS}
        values["arch"] = values["arch"] or MODELS.get(values["model"], values["model"])
        values["milliseconds"] = float(raw["milliseconds"])
        for count in ("npu_layers", "layers"):
            try:
                values[count] = int(values[count] or 0)
            except ValueError:
                raise HexfuseError(f"published table {path}: {count} {values[count]!r} is not an integer") from None
        rows.append(Published(**values))
    return rows


def write_table(rows: list[Published], path: str | Path) -> None:
    out = io.StringIO()
    writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(asdict(row))
    Path(path).write_text(out.getvalue(), encoding="utf-8")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={repo}", *args], check=True, capture_output=True, text=True).stdout


def _on_npu(entry: dict) -> bool:
    counts = entry.get("layer_counts") or {}
    return bool(counts.get("total")) and counts.get("npu") == counts.get("total")


def _figures(perf: dict, device: str, precision: str) -> tuple[str, dict, str] | None:
    """(runtime, perf entry, note) of the preferred usable figure, or None."""
    components = (perf.get("precisions", {}).get(precision) or {}).get("components") or {}
    for component in components.values():  # classifiers have one component
        metrics = (component.get("performance_metrics") or {}).get(device) or {}
        why = []
        for runtime in RUNTIMES:
            entry = metrics.get(runtime)
            if not entry or entry.get("job_status") != "Passed" or not entry.get("inference_time_milliseconds"):
                why.append(f"no passed {runtime} job")
            elif not _on_npu(entry):
                counts = entry.get("layer_counts") or {}
                why.append(f"{runtime} ran {counts.get('npu', 0)} of {counts.get('total', '?')} layers on the NPU "
                           f"({entry['inference_time_milliseconds']} ms)")
            else:
                return runtime, entry, "; ".join(why)
    return None


def collect(repo: Path) -> list[Published]:
    """Every (model, chipset, precision) figure of MODELS, newest commit first, from a git snapshot."""
    import yaml  # PyYAML: only needed to rebuild the table

    rows = []
    for model, arch in MODELS.items():
        path = f"qai_hub_models/models/{model}/perf.yaml"
        commits = _git(repo, "log", "--format=%H", "--", path).split()
        parsed: dict[str, dict] = {}
        for chipset, device in DEVICES.items():
            for precision in PRECISIONS:
                for commit in commits:
                    if commit not in parsed:
                        parsed[commit] = yaml.safe_load(_git(repo, "show", f"{commit}:{path}")) or {}
                    found = _figures(parsed[commit], device, precision)
                    if found is None:
                        continue
                    runtime, entry, note = found
                    tools, counts = entry.get("tool_versions") or {}, entry["layer_counts"]
                    rows.append(Published(model, arch, device, chipset, runtime, precision,
                                          float(entry["inference_time_milliseconds"]), str(entry["job_id"]),
                                          str(tools.get("qairt", "")), str(tools.get("onnx_runtime", "")),
                                          int(counts["npu"]), int(counts["total"]), commit, note))
                    break
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="git directory of a quic/ai-hub-models snapshot")
    parser.add_argument("-o", "--output", type=Path, default=TABLE)
    args = parser.parse_args(argv)
    rows = collect(args.repo)
    write_table(rows, args.output)
    print(f"{len(rows)} rows, {len({r.model for r in rows})} models -> {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
