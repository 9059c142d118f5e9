"""The lessons, one package each: kernels (what learners read), model, experiments and figures."""
