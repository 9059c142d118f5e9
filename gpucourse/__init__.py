"""gpucourse: the library behind the GPU-performance course's notebooks and labs.

Importing it decides, once, whether kernels run on a GPU or in Numba's CUDA simulator
(see gpucourse.runtime); import it before numba.
"""

import os

from gpucourse import runtime  # noqa: F401  (must run before numba is imported)
from gpucourse.errors import CourseError, InvalidConfig, NoGPU  # noqa: F401

__version__ = "0.1.0"

if os.environ.get("GPUCOURSE_STATIC") == "1":  # building the static website (make book)
    from gpucourse.book import configure_static_plotly

    configure_static_plotly()
