"""Benchmarks and fits: each prints figures measured in one run (or fits constants from them); nothing the
product runs imports them. The product commands live beside this folder (ab/, device/, qnn_engines, optrace)."""
