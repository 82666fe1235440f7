"""Suite-wide setup: engine maps come only from the repository (models/engines/) or from a test's own
files, never from the user's cache (~/.cache/hexfuse/engines), so results do not depend on the machine."""

from __future__ import annotations

import os
import tempfile

from hexfuse.graph_passes.engines.engine_map import CACHE_ENV

os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="hexfuse-test-engines-")
