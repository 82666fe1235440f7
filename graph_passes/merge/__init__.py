"""Two requests in one graph (``hexfuse merge``).

    requests.py  merge two models into one graph that runs both independently
    cli.py       the ``hexfuse merge`` command
"""
