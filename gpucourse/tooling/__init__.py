"""Course tooling: notebook build, labs and grading (with its sandbox), the website,
JupyterLab launch, doctor and install."""
