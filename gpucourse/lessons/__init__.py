"""One package per lesson: kernels (what learners read), model, experiments and figures."""
