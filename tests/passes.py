"""The pass as most tests drive it: the op package's backend with scalar vector kernels allowed.

The pass's own mechanics (independence, rewrite, verification, sharing) are tested on float models too,
whose vector kernels have no HVX path yet (op_package/hvx_coverage.py); tests of what HTP targets refuse
call ``hexfuse.analyze_model`` / ``hexfuse.fuse_model`` directly.
"""

from __future__ import annotations

from functools import partial

import hexfuse

analyze_model = partial(hexfuse.analyze_model, allow_scalar=True)
fuse_model = partial(hexfuse.fuse_model, allow_scalar=True)
