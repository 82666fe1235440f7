"""``python -m hexfuse``: the same as the ``hexfuse`` command."""

import sys

from hexfuse.cli import main

sys.exit(main())
