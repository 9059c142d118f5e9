"""Lesson 08 "Feeding the GPU": copies, streams, launches and graphs, hidden syncs, fusion, the L2.

    from gpucourse.lessons import feeding
    feeding.timeline_explorer()          # the timeline model (host, copy engines, SMs)
    feeding.chain_bytes(1 << 24)         # bytes counted by hand
"""

from gpucourse.lessons.feeding import kernels  # noqa: F401
from gpucourse.lessons.feeding.experiments import (  # noqa: F401
    ELEMENTWISE_OPS,
    MATMUL_OPS,
    chain_check,
    chain_inputs,
    chain_reference,
    copy_sweep,
    fused_chain_run,
    fusion_sweep,
    hidden_sync_table,
    l2_sweep,
    launch_sweep,
    matmul_shapes_and_dtypes,
    overlap_events,
    profile_counts,
    profile_ops,
    sync_sweep,
    time_per_step_ms,
    unfused_chain,
)
from gpucourse.lessons.feeding.figures import (  # noqa: F401
    DATA_MIB,
    SCENARIOS,
    copy_figure,
    fusion_claim_figure,
    fusion_figure,
    l2_figure,
    l2_model_table,
    launch_figure,
    measured_overlap_figure,
    model_timeline_figure,
    published_hbm_gbps,
    scenario_ops,
    stream_timeline_figure,
    sync_figure,
    timeline_explorer,
    timeline_figure,
)
from gpucourse.lessons.feeding.model import (  # noqa: F401
    CHAIN,
    DEFAULTS,
    PARAM_SOURCES,
    Copy,
    Graph,
    HostWork,
    Kernel,
    Params,
    Sync,
    chain_bytes,
    chain_launches,
    chain_time_us,
    copy_gbps,
    copy_time_us,
    fraction_for_speedup,
    l2_gbps,
    l2_model_vs,
    pipeline,
    small_kernels,
    speedup_from_fusion,
    summary,
    timeline,
    training_loop,
)
from gpucourse.lessons.feeding.syncs import (  # noqa: F401
    BLOCKING_COPY,
    RUNTIME_SYNC_EVENTS,
    SYNC_OPS,
    code_line,
    code_lines,
    host_syncs,
    spy,
)
