"""Bad input that used to end in the CLI's last-resort "internal error (SomeException: ...)": a --fix-dim
past int64 or given twice, a binary file as a target or published table, an empty -o, a file that starts
like a zip but is none as --inputs, a negative --seed of bundle and compile, a regular file as engines'
--keep. Each now ends in one ``hexfuse: error:`` line naming what is wrong, with exit 1, and writes
nothing. An engine-map cache that cannot be searched is no error at all: the run goes on without a map.
A CPU run that fails in `ab` no longer has ORT's own log line before ours."""

from __future__ import annotations

from pathlib import Path

import pytest

from hexfuse.cli import main
from hexfuse.graph_passes.engines.engine_map import CACHE_ENV
from hexfuse.graph_passes.errors import HexfuseError
from tests import builders
from tests.hardening._support import named_two_branch, one_error, run

NAMES = ["x", "w", "y", "sm", "two", "s", "mm", "softmax", "mul"]
NOT_A_ZIP = b"PK\x03\x04garbage"  # the zip magic, then nothing a zip reader can use
BINARY = bytes(range(256)) * 4  # not UTF-8 (0x80 cannot start a character)


@pytest.fixture(scope="module")
def fused(tmp_path_factory) -> Path:
    """A fused model with its spec (bundle's second input)."""
    folder = tmp_path_factory.mktemp("fused")
    (folder / "m.onnx").write_bytes(named_two_branch(NAMES).SerializeToString())
    assert main(["fuse", str(folder / "m.onnx"), "-o", str(folder / "f.onnx"), "--min-gain", "0", "--as-designed", "--allow-scalar",
                 "--no-verify"]) == 0
    return folder / "f.onnx"


def _dynamic(tmp_path: Path) -> Path:
    return Path(builders.save(builders.dynamic_two_branch(), tmp_path / "dynamic.onnx"))


# --- fuse: --fix-dim, --target, -o ----------------------------------------------------------------------

@pytest.mark.parametrize("pins, message", [
    (["batch=99999999999999999999"], "--fix-dim 'batch=99999999999999999999': VALUE must be at most 9223372036854775807"),
    (["batch=1", "batch=2"], "--fix-dim batch: given two values, 1 and 2"),
    (["batch=²"], "expected NAME=VALUE with a positive integer VALUE"),  # a digit to isdigit(), not to int()
])
def test_a_bad_fix_dim_is_one_line(tmp_path, capsys, pins, message):
    out = tmp_path / "out" / "f.onnx"
    code, err = run(capsys, "fuse", _dynamic(tmp_path), "-o", out, *(a for pin in pins for a in ("--fix-dim", pin)))
    assert code == 1 and message in one_error(err)
    assert not out.parent.exists()


def test_a_fix_dim_given_twice_alike_is_one_pin():
    from hexfuse.graph_passes.load.model import parse_fix_dims

    assert parse_fix_dims(["N=4", " N = 4", "S=2"]) == {"N": 4, "S": 2}
    assert parse_fix_dims([f"N={2**63 - 1}"]) == {"N": 2**63 - 1}
    with pytest.raises(HexfuseError, match="given two values, 4 and 5"):
        parse_fix_dims(["N=4", "N=5"])


def test_a_binary_target_file_is_one_line(tmp_path, capsys):
    target = tmp_path / "target.onnx"
    target.write_bytes(BINARY)
    out = tmp_path / "f.onnx"
    code, err = run(capsys, "fuse", _dynamic(tmp_path), "--target", target, "-o", out)
    assert code == 1 and f"target {target}: not a target JSON file (not UTF-8 text)" in one_error(err)
    assert not out.exists()


@pytest.mark.parametrize("output", ["", ".", "/"])
def test_fuse_refuses_an_output_path_without_a_file_name(tmp_path, capsys, monkeypatch, output):
    monkeypatch.chdir(tmp_path)
    model = _dynamic(tmp_path)
    code, err = run(capsys, "fuse", model, "-o", output)
    assert code == 1 and f"-o {output!r}: not a file path, expected an output .onnx path" in one_error(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == [model.name]


# --- calibrate --published ---------------------------------------------------------------------------------

def test_a_binary_published_table_is_one_line(tmp_path, capsys):
    table = tmp_path / "table.csv"
    table.write_bytes(BINARY)
    code, err = run(capsys, "calibrate", "--published", table, "-o", tmp_path / "new.json")
    assert code == 1 and f"published table {table}: not a CSV table (not UTF-8 text)" in one_error(err)
    assert not (tmp_path / "new.json").exists()


# --- inputs of ab, compile, bundle ------------------------------------------------------------------------

def test_an_inputs_file_that_only_starts_like_a_zip_is_one_line(tmp_path, fused, capsys):
    from hexfuse.tools.ab.inputs import load_npz

    bad = tmp_path / "inputs.npz"
    bad.write_bytes(NOT_A_ZIP)
    with pytest.raises(HexfuseError, match=r"inputs.npz is not a NumPy .npz file \(BadZipFile\)"):
        load_npz(str(bad), [])
    out = tmp_path / "bundle"
    code, err = run(capsys, "bundle", fused.with_name("m.onnx"), fused, "-o", out, "--target", "sm8550",
                    "--no-build", "--inputs", bad)
    assert code == 1 and f"{bad} is not a NumPy .npz file (BadZipFile)" in one_error(err)
    assert not out.exists()


def test_bundle_refuses_a_negative_seed_as_ab_does(tmp_path, fused, capsys):
    out = tmp_path / "bundle"
    code, err = run(capsys, "bundle", fused.with_name("m.onnx"), fused, "-o", out, "--target", "sm8550",
                    "--no-build", "--seed", "-5")
    assert code == 1 and "--seed must be in [0, 9223372036854775807], got -5" in one_error(err)
    assert not out.exists()


def test_compile_refuses_a_negative_seed_as_ab_does(tmp_path, capsys, monkeypatch):
    from hexfuse.tools.ab import qnn_session

    monkeypatch.setattr(qnn_session, "qnn_available", lambda: True)  # the seed is checked before any session
    model = builders.save(builders.two_branch(8), tmp_path / "m.onnx")
    out = tmp_path / "m.ctx.onnx"
    code, err = run(capsys, "compile", model, "-o", out, "--seed", "-1")
    assert code == 1 and "--seed must be in [0, 9223372036854775807], got -1" in one_error(err)
    assert not out.exists()


def test_seeded_inputs_refuse_a_seed_out_of_range():
    from hexfuse.tools.ab.inputs import random_inputs

    with pytest.raises(HexfuseError, match=r"--seed must be in \[0, 9223372036854775807\], got -1"):
        random_inputs([], -1)
    with pytest.raises(HexfuseError, match="got 9223372036854775808"):
        random_inputs([], 2**63)


# --- engines --keep, and the engine-map cache ---------------------------------------------------------------

def test_engines_keep_that_is_a_regular_file_is_one_line(tmp_path, capsys):
    model = builders.save(builders.two_branch(8), tmp_path / "m.onnx")
    keep = tmp_path / "keep"
    keep.write_text("mine\n")
    code, err = run(capsys, "engines", model, "--keep", keep, "-o", tmp_path / "map.json")
    assert code == 1 and f"{keep}: exists and is not a directory" in one_error(err)
    assert keep.read_text() == "mine\n" and not (tmp_path / "map.json").exists()


def test_an_engine_map_cache_that_cannot_be_searched_counts_as_absent(tmp_path, capsys, monkeypatch):
    # As another user with HOME in an unreadable home: stat() of the cached map's path is EACCES. Root
    # ignores permission bits, so the refusal is simulated.
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(cache))
    is_file = Path.is_file

    def denied(path: Path) -> bool:
        if cache in path.parents:
            raise PermissionError(13, "Permission denied", str(path))
        return is_file(path)

    monkeypatch.setattr(Path, "is_file", denied)
    model = builders.save(builders.two_branch(8), tmp_path / "m.onnx")
    assert main(["analyze", model]) == 0
    out, err = capsys.readouterr()
    assert "hexfuse: error" not in err and "no engine map for target sm8550" in out


def test_a_failed_cpu_run_in_ab_is_one_line_without_ort_s_own_log(tmp_path, capfd):
    """An index out of range in --inputs: ORT logged its own coloured error line before our one line."""
    import numpy as np

    model = builders.save(builders.embedding_branches(rows=10), tmp_path / "m.onnx")
    np.savez(tmp_path / "ids.npz", ids=np.full((1, 8), 99, np.int64))
    assert main(["fuse", model, "-o", str(tmp_path / "f.onnx"), "--min-gain", "0", "--as-designed", "--allow-scalar", "--no-verify"]) == 0
    capfd.readouterr()
    code = main(["ab", model, str(tmp_path / "f.onnx"), "--inputs", str(tmp_path / "ids.npz"), "--no-cpu-package", "-q"])
    err = capfd.readouterr().err  # file descriptor 2: ORT's C++ logger writes there, not to sys.stderr
    assert code == 1 and "indices element out of data bounds" in one_error(err)
    assert "onnxruntime" not in err.replace(one_error(err), ""), err
