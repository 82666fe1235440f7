"""Real-device anchors of the cost model (issue 20).

    published.csv   latencies Qualcomm measured on phones for public models (quic/ai-hub-models perf.yaml)
    published.py    that table: its schema, how it is read, and how it is rebuilt from a snapshot
    zoo.py          the same architectures built from torchvision and exported to ONNX (optional extra)
    bench.py        predicted vs published, before / held out / fitted (tools/bench/bench_anchors.py)
The whole-model latency and the fit itself live in graph_passes/cost/calibrate.py (``hexfuse calibrate
--published`` uses them too).
"""
