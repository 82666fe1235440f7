#!/usr/bin/env python3
"""The cost model against real Snapdragon phones: predicted vs published latency of public models (issue 20).

    # 1. export the models (torch + torchvision: the optional extra hexfuse[export], any environment)
    python tools/anchors/zoo.py --out ~/.cache/hexfuse/anchors
    # 2. compare (and fit) in the project environment
    python tools/bench/bench_anchors.py                          # predicted vs published, bundled targets
    python tools/bench/bench_anchors.py --fit                    # + k-fold held-out fit, before/after table
    python tools/bench/bench_anchors.py --fit --write            # + write the fitted constants into qnn_configs/targets
    python tools/bench/bench_anchors.py --export-python /work/venv-export/bin/python   # export missing models first

The published figures are tools/anchors/published.csv (quic/ai-hub-models perf.yaml, see
tools/anchors/published.py); the prediction is the whole-model serial latency of the original model
(``serial_us`` of ``hexfuse analyze --json``); the fit is tools/anchors/fit.py. docs/anchors.md has
the results.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from hexfuse.graph_passes.cost.target import TARGETS_DIR, load_target
from hexfuse.tools.anchors import bench
from hexfuse.tools.anchors.published import DEVICES, TABLE, read_table

CACHE = Path.home() / ".cache" / "hexfuse" / "anchors"
ZOO = Path(__file__).resolve().parents[1] / "anchors" / "zoo.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--table", type=Path, default=TABLE, help="published figures (default: the bundled table)")
    parser.add_argument("--cache", type=Path, default=CACHE, help=f"exported models (default {CACHE})")
    parser.add_argument("--chipset", action="append", choices=sorted(DEVICES), help="default: all three")
    parser.add_argument("--precision", action="append", choices=("float", "w8a8"), help="default: both")
    parser.add_argument("--model", action="append", help="only these model ids")
    parser.add_argument("--fit", action="store_true", help="fit the constants (k-fold held out, then on all rows)")
    parser.add_argument("--iterations", type=int, default=10, help="Levenberg-Marquardt iterations per fit")
    parser.add_argument("--write", action="store_true", help="write fitted constants into qnn_configs/targets/*.json")
    parser.add_argument("--cap", action="append", default=[], metavar="NAME=VALUE",
                        help="upper bound on a fitted constant from outside the rows, e.g. "
                        "hmx_int8_macs_per_cycle=23836 for sm8550 (v73 no faster than v75's fit)")
    parser.add_argument("--markdown", type=Path, help="also write the tables as Markdown here")
    parser.add_argument("--export-python", help="a Python with torch + torchvision: export missing models with it")
    args = parser.parse_args(argv)
    if args.write and not args.fit:
        parser.error("--write needs --fit")

    rows = [r for r in read_table(args.table)
            if (not args.chipset or r.chipset in args.chipset) and (not args.precision or r.precision in args.precision)
            and (not args.model or r.model in args.model)]
    if args.export_python:
        models = sorted({r.model for r in rows})
        subprocess.run([args.export_python, str(ZOO), "--out", str(args.cache), *models], check=False)
    start = time.time()
    kept, cases = bench.load_cases(rows, args.cache, log=lambda m: print(m, file=sys.stderr))
    print(f"{len(kept)} of {len(rows)} rows have an exported model ({time.time() - start:.0f} s to analyse)",
          file=sys.stderr)
    chips = []
    for chipset in sorted({r.chipset for r in kept}):
        picked = [i for i, r in enumerate(kept) if r.chipset == chipset]
        chip = bench.Chipset(chipset, load_target(chipset), [kept[i] for i in picked], [cases[i] for i in picked])
        t0 = time.time()
        caps = {name: float(value) for name, value in (c.split("=", 1) for c in args.cap)}
        bench.run_chipset(chip, args.fit, iterations=args.iterations, caps=caps)
        print(f"\n## {chipset} ({chip.rows[0].device}) {time.time() - t0:.0f} s\n", file=sys.stderr)
        print(bench.row_table(chip))
        chips.append(chip)
    print("\n" + bench.error_table(chips))
    if args.fit:
        print("\n" + bench.constants_table(chips))
    if args.markdown:
        parts = [bench.error_table(chips)] + ([bench.constants_table(chips)] if args.fit else [])
        parts += [f"### {c.name}\n\n{bench.row_table(c)}" for c in chips]
        args.markdown.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    if args.write:
        table = "tools/anchors/published.csv" if args.table == TABLE else str(args.table)
        for chip in chips:
            path = TARGETS_DIR / f"{chip.name}.json"
            bench.write_target(chip, path, table)
            load_target(path)  # what we wrote must load
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
