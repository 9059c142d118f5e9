"""Lab 11 draws no chart of its own: the learner reads the microscope's and the profiler's tables."""
