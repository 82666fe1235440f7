"""Does a fusion spec describe this fused model? Checked before a spec is used or carried forward.

Two checks, both cheap:
  hash   the spec's ``model_sha256`` (schema 4) must be the hash of the model file: a model and a
         spec of two different runs (an interrupted or killed write, a file copied over) never pair
  nodes  the model's fused nodes are exactly the spec's instances, each calling its op type (older
         specs carry no hash; and a hand-edited spec can claim any hash)
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec import FusionSpec

FUSE_AGAIN = "regenerate both with `hexfuse fuse`"


def check_spec_describes(model_path: Path, model_bytes: bytes, spec: FusionSpec, spec_path: Path) -> None:
    import onnx  # the node check parses the model; the op package generator itself never does

    if spec.model_sha256:
        actual = hashlib.sha256(model_bytes).hexdigest()
        if actual != spec.model_sha256:
            raise HexfuseError(f"{model_path} is not the model {spec_path} was written for (model sha256 "
                               f"{actual[:12]}…, the spec's {spec.model_sha256[:12]}…): {FUSE_AGAIN}")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(model_bytes)
    except Exception:  # protobuf raises DecodeError and RuntimeWarning on garbage
        raise HexfuseError(f"cannot read fused model {model_path}: not an ONNX model") from None
    present = {n.name: n.op_type for n in proto.graph.node if n.domain == spec.domain}
    described = {name: op.op_type for op in spec.fused_ops for name in (op.instances or (op.node_name,))}
    missing = [name for name, op_type in described.items() if present.get(name) != op_type]
    if missing:
        raise HexfuseError(f"{model_path} has no fused node {missing[0]!r} of op type {described[missing[0]]} described "
                           f"by its spec ({len(missing)} missing): {FUSE_AGAIN}")
    unknown = sorted(set(present) - set(described))
    if unknown:
        raise HexfuseError(f"{model_path} has fused node {unknown[0]!r} that its spec does not describe "
                           f"({len(unknown)} such): {FUSE_AGAIN}")
