"""One package per lesson: kernels, model, experiments and figures (see ARCHITECTURE)."""
