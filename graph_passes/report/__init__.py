"""What the pass tells the user.

    document.py  report_data (analyze --json) and render_report (the .hexfuse.md report)
    engines.py   per group: what runs where, which source decided, how the gain splits
    labels.py    node names as the user finds them in their own file
    outputs.py   what analyze prints and fuse writes, after the pass has run
"""
