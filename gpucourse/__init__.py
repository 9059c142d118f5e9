"""gpucourse: the library behind the GPU-performance course's notebooks and labs.

Importing it decides, once, whether kernels run on a GPU or in Numba's CUDA simulator
(see gpucourse.measure.runtime); import it before numba.
"""

import os

from gpucourse.errors import CourseError, InvalidConfig, NoGPU  # noqa: F401
from gpucourse.measure import runtime  # noqa: F401  (must run before numba is imported)
from gpucourse.viz.first_chart import defer_iri_parsers

defer_iri_parsers()  # a new kernel's first chart 2.7 s sooner (see that module)

__version__ = "0.1.0"

if os.environ.get("GPUCOURSE_STATIC") == "1":  # building the static website (make book)
    from gpucourse.tooling.book import configure_static_plotly

    configure_static_plotly()
