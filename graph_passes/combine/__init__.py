"""Combine requests that share a model: the same op on the same weights, run once on the rows of all.

    view.py       the model as requests: which request each node belongs to, shapes, equal-valued constants
    rows.py       which ops compute each row of a row axis from that row alone, and where that axis goes
    match.py      counterpart nodes across requests (same op, attributes, constants; corresponding inputs)
    plan.py       the combined chains: row axes solved, what is left apart per request and why
    rewrite.py    the combined model: one native op per chain node, Concat where a chain starts, Split where it ends
    price.py      what combining saves: weight bytes moved once, rows padded to HMX tiles (estimated)
    verify.py     each request's outputs from the combined model against the merged one on ONNX Runtime
    report.py     the report (Markdown) and its JSON
    cli.py        ``hexfuse combine``

A combined group is made of native ONNX ops, not a package op: QNN's own HMX kernels run the projections
on more rows while reading each weight once, which is where requests pay on HTP (decode reads weights).
"""
