"""run_ab.py tells the user, before the inlined run, that the QNN EP's red 'Unsupported nodes' lines are expected."""

from __future__ import annotations

import inspect

from hexfuse.tools.device import bundle, run_script


def test_the_note_names_the_run_the_bundle_makes_without_a_package():
    inlined = [run for run in bundle.RUNS if run.role == "fused" and not run.package]
    assert [run.key for run in inlined] == [run_script.INLINED]
    assert "Unsupported nodes in QNN EP" in run_script.INLINED_NOTE and "expected" in run_script.INLINED_NOTE


def test_the_note_is_said_before_that_run_s_session():
    source = inspect.getsource(run_script._run)
    assert source.index("INLINED_NOTE") < source.index("qnn.session(")
