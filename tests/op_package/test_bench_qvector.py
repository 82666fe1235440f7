"""tools/bench/bench_qvector.py runs end to end on a small tensor (no timing is asserted: speed is the script's output)."""

from __future__ import annotations

from hexfuse.tools.bench import bench_qvector


def test_bench_prints_one_row_per_kernel(capsys) -> None:
    assert bench_qvector.main(["--elements", "512", "--reps", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.endswith("x")]
    assert [r.split("  ")[0].strip() for r in rows] == [u.name for u in bench_qvector.units(512)]
