"""Lesson 10 "Data-parallel training: overlap and sharding": DDP from scratch (per parameter, flat, hooks,
buckets), the step's timeline model, ZeRO/FSDP memory and traffic, and ranks run as real processes.

    from gpucourse.lessons import dataparallel
    dataparallel.run_ranks()                 # 2 gloo processes: every variant checked against one process
    dataparallel.bucket_explorer()           # the timeline model: bucket size → overlap (the U-curve)
    dataparallel.memory_figure()             # per-rank memory, DDP and ZeRO stages 1-3

The process side (``ranks``) is not imported here: each rank's process imports it itself.
"""

from gpucourse.lessons.dataparallel import kernels  # noqa: F401
from gpucourse.lessons.dataparallel.experiments import (  # noqa: F401
    ONE_GPU,
    bucket_table,
    counts_table,
    predicted_overlap,
    run_ranks,
    stream_overlap,
)
from gpucourse.lessons.dataparallel.figures import (  # noqa: F401
    CAPS_MIB,
    SCENARIO,
    bucket_curve_figure,
    bucket_explorer,
    bucket_plateaus,
    bucket_sweep,
    ddp_figure,
    ddp_step,
    first_bucket_bytes,
    fsdp_explorer,
    fsdp_figure,
    fsdp_step,
    fsdp_waits,
    gantt,
    memory_figure,
    traffic_table,
)
from gpucourse.lessons.dataparallel.kernels import (  # noqa: F401
    BUCKET_CAP_BYTES,
    FIRST_BUCKET_BYTES,
    BucketedReducer,
    Comm,
    assign_buckets,
    small_model,
)
from gpucourse.lessons.dataparallel.model import (  # noqa: F401
    EFFICIENCY,
    STAGES,
    Layer,
    alpha_beta,
    collective_cost,
    compute_s,
    ddp_schedule,
    fsdp_schedule,
    layer_buckets,
    memory_per_rank,
    mlp_layers,
    summary,
    traffic_per_rank,
    transformer_layers,
)
