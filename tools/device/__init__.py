"""Ship fused models the way QNN models ship: context binaries, a one-folder device bundle, its results."""
