"""Lesson 09 "Collectives": all-reduce and friends on simulated ranks, the α-β-γ model, gloo on your computer.

    from gpucourse.lessons import collectives
    collectives.run("all_reduce", "ring", 8, 1 << 20)        # the microscope: bytes, steps, model time
    collectives.model.collective_time_s("all_reduce", "ring", 1 << 20, 8, collectives.LINKS["nvlink4"])
    collectives.gloo_check(2)                                # real processes on this computer
"""

from gpucourse.lessons.collectives import distworker, kernels, model  # noqa: F401
from gpucourse.lessons.collectives.experiments import (  # noqa: F401
    RING_FORBIDDEN,
    CollectiveRun,
    RecordingWorld,
    closed_form_counts,
    execute,
    gloo_check,
    gloo_pingpong,
    judge_ring,
    model_sweep,
    run,
    sizes_bytes,
)
from gpucourse.lessons.collectives.figures import (  # noqa: F401
    NVLS_QUOTES,
    azure_busbw,
    busbw_figure,
    explorer_widget,
    link_bytes_figure,
    pingpong_figure,
    ring_steps_figure,
    step_states,
    time_vs_size_figure,
)
from gpucourse.lessons.collectives.kernels import World  # noqa: F401
from gpucourse.lessons.collectives.model import (  # noqa: F401
    ALGORITHMS,
    LINKS,
    OPS,
    Link,
    algbw_bytes_per_s,
    busbw_bytes_per_s,
    busbw_factor,
    collective_time_s,
    crossover_bytes,
    knee_bytes,
)
