"""Ship fused models the way QNN models ship, and bring the device's answer back.

    compile.  context.py   MODEL (+ op package) --HTP backend on x86--> EPContext model, loaded back, checked
    bundle.   bundle.py    ORIGINAL + FUSED --> one folder: models, contexts, package, inputs, options, run_ab.py
    device.   run_script.py (copied as run_ab.py; onnxruntime + QNN EP only) --> results/
    import.   tools/ab/imported.py: `hexfuse ab --import results/` reports it like a normal A/B

targets.py ties a device (sm8650) to its QNN preset and HTP build; packages.py finds a generated
package's op types and htp_x86 library. docs/device.md is the runbook.
"""
