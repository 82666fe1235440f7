"""Long property run: fuse thousands of random DAG models and check each against the original.

    python tools/bench/fuzz_pass.py [--examples 5000]

CI runs the same property (tests/graph_passes/test_property.py) with a bounded example count; this
script runs it with many more and prints hypothesis' statistics.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=5000)
    args = parser.parse_args()
    env = {**os.environ, "HEXFUSE_PROPERTY_EXAMPLES": str(args.examples)}
    command = [sys.executable, "-m", "pytest", "-q", "--hypothesis-show-statistics", "tests/graph_passes/test_property.py"]
    return subprocess.run(command, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
