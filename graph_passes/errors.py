"""The one exception type of hexfuse.

The CLI catches it and prints ``hexfuse: error: <message>`` on one line. Raise it with a message that
names the offending file, node or value; callers never need to parse it.
"""


class HexfuseError(Exception):
    """A user-facing failure: bad input, unsupported model, missing SDK, failed verification."""
