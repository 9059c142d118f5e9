"""Lesson 09 "Collectives": all-reduce and friends on simulated ranks, the α-β-γ model, gloo on your computer.

    from gpucourse.lessons.collectives import model
    model.collective_time_s("all_reduce", "ring", 1 << 20, 8, model.LINKS["nvlink4"])
"""

from gpucourse.lessons.collectives import model  # noqa: F401
