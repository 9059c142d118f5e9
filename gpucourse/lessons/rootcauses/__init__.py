"""Lab 11 "Root causes": mystery kernels and steps, the causes' vocabulary, and what their profiles show.

    from gpucourse.lessons import rootcauses
    rootcauses.CAUSES                      # the fixed vocabulary
    rootcauses.launch("brighten")          # (kernel, grid, block, args) of a mystery kernel
    rootcauses.evidence_values("tally")    # {metric: value} of a mystery's profile
"""

from gpucourse.lessons.rootcauses import kernels  # noqa: F401
from gpucourse.lessons.rootcauses.model import (  # noqa: F401
    CAUSE_METRICS,
    CAUSES,
    KERNEL_MYSTERIES,
    MYSTERIES,
    STEP_MYSTERIES,
    evidence_matches,
    evidence_values,
    launch,
    shows,
    step_counts,
    step_inputs,
    top_level_ops,
)
