"""Charts, live widgets and diagrams shared by every lesson."""
