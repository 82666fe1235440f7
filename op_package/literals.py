"""The last gate before C++ is written: values a template prints as code must be code we emit.

Model strings reach templates only through render.py's escaping filters. Two kinds of value are
printed as code, not as strings, and are checked here instead:

  kernel literals   params fields of lowered nodes (lower/context.cpp): numbers, enum names,
                    braced lists of them: ``128``, ``-1LL``, ``1e-05f``, ``-HUGE_VALF``,
                    ``hexfuse::PadMode::kReflect``, ``{{2, 3, 0}}``
  HTP rules         optimization-grammar expressions (htp_expand.py, qnn_ops.py): calls, numbers,
                    short quoted op and tag names: ``Op(FROM_DEFAULT_PACKAGE("QNN_MatMul"), "in_0", ...)``

Neither may hold a quote beyond a plain quoted name, a semicolon, a brace in a rule, a comment
marker, a backslash or a newline: nothing that ends the statement, the string or the line. The spec
reader (graph_passes/spec/read.py) already refuses attributes of the wrong type, so a violation
here means a lowering rule printed something unexpected: refused, never written.
"""

from __future__ import annotations

import re

from hexfuse.graph_passes.errors import HexfuseError

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_ATOM = rf"-?(?:[0-9][0-9.]*(?:e[+-]?[0-9]+)?(?:f|LL)?|HUGE_VALF|{_IDENT}(?:::{_IDENT})*)"
_LITERAL = re.compile(rf"(?:{_ATOM}|[{{}}, ])+")
_RULE = re.compile(rf'(?:{_IDENT}|-?[0-9][0-9.]*(?:e[+-]?[0-9]+)?f?|"[A-Za-z0-9_$]*"|::|[(),. ])+')


def check_kernel_literal(field: str, value: str, where: str) -> None:
    # a field is a member path of the params struct (``pool.H`` for nested structs)
    if not re.fullmatch(rf"{_IDENT}(?:\.{_IDENT})*", field) or not _LITERAL.fullmatch(value):
        raise HexfuseError(f"{where}: kernel parameter {field[:40]!r} = {value[:60]!r} is not a C++ literal; refused")


def check_rule(text: str, where: str) -> None:
    if not _RULE.fullmatch(text):
        raise HexfuseError(f"{where}: HTP rule {text[:80]!r} holds characters outside the optimization grammar; refused")
