"""Lab 11 "Root causes": mystery kernels and steps, the causes' vocabulary, and what their profiles show.

    from gpucourse.lessons import rootcauses
    rootcauses.CAUSES                      # the fixed vocabulary
    rootcauses.launch("brighten")          # (kernel, grid, block, args) of a mystery kernel
    rootcauses.evidence_values("tally")    # {metric: value} of a mystery's profile
    rootcauses.launch("brighten", seed=3)  # other inputs, other sizes: a fix is judged there too
"""

from gpucourse.lessons.rootcauses import kernels  # noqa: F401
from gpucourse.lessons.rootcauses.experiments import (  # noqa: F401
    fresh_seed,
    host_read_error,
    mystery_output,
    plain_pair,
    plain_word,
    run_kernel,
    run_step,
)
from gpucourse.lessons.rootcauses.model import (  # noqa: F401
    CAUSE_METRICS,
    CAUSE_SIGNS,
    CAUSES,
    KERNEL_MYSTERIES,
    MYSTERIES,
    SEED,
    STEP_MYSTERIES,
    evidence_matches,
    evidence_values,
    launch,
    shows,
    step_counts,
    step_inputs,
    top_level_ops,
)
