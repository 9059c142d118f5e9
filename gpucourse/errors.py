"""Errors a learner can read: one line that says what is allowed, never a wall of traceback.

IPython shows ``_render_traceback_()`` instead of the traceback when an exception has it, so
a bad slider value or a missing GPU prints one sentence in the notebook.
"""


class CourseError(Exception):
    """Base class: something the learner (or instructor) can fix, said in one line."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31m{type(self).__name__}\x1b[0m: {self}"]


class InvalidConfig(CourseError, ValueError):
    """A launch configuration, size or option that is not allowed. Raised before any kernel runs."""


class NoGPU(CourseError, RuntimeError):
    """Something that needs a real GPU was asked for in simulator mode."""


class GPUError(CourseError, RuntimeError):
    """The GPU reported an error (illegal address, out of memory); said in plain words."""


class WrongResult(CourseError, AssertionError):
    """A kernel produced a wrong answer, so it was not timed."""


# --- errors from the GPU libraries, in one line ----------------------------------------------------

RESTART = "The GPU context is now unusable: restart the kernel (Kernel → Restart) to continue."

# (words to look for, with case, spaces and underscores removed; what happened; what to do).
# The CUDA driver API calls these CUDA_ERROR_*, the runtime cudaError*, torch says them in words.
# Errors marked RESTART are "sticky": the CUDA Runtime API reference says of them (enum
# cudaError, e.g. cudaErrorIllegalAddress) that any further CUDA work returns the same error and
# the process must be terminated and relaunched to use CUDA again.
KNOWN_GPU_ERRORS = (
    # INVALID_ADDRESS_SPACE (717): what an H100 said for a write 4 GB past a 16-byte array (the
    # address is in no memory space at all); sticky like 700 (CUDA Driver API, enum CUresult).
    (("ILLEGALADDRESS", "ILLEGALMEMORYACCESS", "INVALIDADDRESSSPACE"),
     "read or wrote outside its arrays (an illegal memory access)", RESTART),
    (("MISALIGNEDADDRESS",), "accessed memory at an address not aligned to the access size", RESTART),
    (("ILLEGALINSTRUCTION",), "executed an illegal instruction", RESTART),
    (("DEVICESIDEASSERT", "ERRORASSERT"), "failed a device-side assert", RESTART),
    (("LAUNCHFAILED", "UNSPECIFIEDLAUNCHFAILURE", "LAUNCHFAILURE"), "failed while running on the GPU", RESTART),
    (("LAUNCHTIMEOUT",), "ran longer than the display driver's watchdog allows", RESTART),
    (("UNSUPPORTEDPTXVERSION", "UNSUPPORTEDVERSION"),
     "was compiled to PTX newer than this NVIDIA driver understands",
     "Install an nvJitLink of the compiler's CUDA version (numba-cuda 0.30+ then links on the host), or an NVVM "
     "no newer than the driver's CUDA, or update the NVIDIA driver (`python -m gpucourse doctor` shows all three)."),
    (("INSUFFICIENTDRIVER",), "needs a newer NVIDIA driver than this machine has",
     "Update the NVIDIA driver, or use the packages for the driver's CUDA version "
     "(`python -m gpucourse doctor`); GPUCOURSE_MODE=sim runs the course without the GPU."),
    (("NOKERNELIMAGE",), "has no build for this GPU's compute capability",
     "Install a build of the library that supports this GPU (`python -m gpucourse doctor`)."),
    (("OUTOFMEMORY",), "asked for more GPU memory than is free",
     "Use a smaller size, or free arrays you no longer need (del them)."),
    (("LAUNCHOUTOFRESOURCES",), "asked for more registers or shared memory than one SM has",
     "Use fewer threads per block, less shared memory, or a register cap (max_registers)."),
    (("INVALIDCONFIGURATION", "INVALIDVALUE"), "was launched with a configuration the GPU refuses",
     "Check the grid and block sizes (at most 1024 threads per block)."),
)

# Only these libraries' exceptions (and RuntimeError/ImportError, which they raise too) are
# translated: a KeyError that happens to contain a matching word is left alone.
GPU_LIBRARIES = ("numba", "cupy", "cupy_backends", "cupyx", "torch", "cuda")


def _squash(text: str) -> str:
    return "".join(c for c in text.upper() if c.isalnum())


def explain_gpu_error(exc: BaseException, what: str = "the kernel") -> str | None:
    """One line for a GPU library's error: what happened and what to do; None if not one of them."""
    if isinstance(exc, CourseError):
        return None
    kind = type(exc)
    module = (kind.__module__ or "").split(".")[0]
    if module not in GPU_LIBRARIES and not issubclass(kind, (RuntimeError, ImportError)):
        return None
    if kind.__name__ == "CCSupportError":  # numba-cuda: the toolkit cannot compile for this GPU
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "compute capability not supported"
        return (f"{what} cannot be compiled for this GPU ({first}). Use a GPU the installed CUDA "
                "toolkit supports, or GPUCOURSE_MODE=sim; `python -m gpucourse doctor` shows the versions.")
    text = _squash(f"{kind.__name__} {exc}")
    for keys, happened, advice in KNOWN_GPU_ERRORS:
        if any(key in text for key in keys):
            return f"{what} {happened}. {advice}"
    return None
