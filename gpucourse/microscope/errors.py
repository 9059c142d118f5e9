"""The microscope's errors: each a ``ValueError`` whose one-line message says what is allowed."""

from gpucourse.errors import InvalidConfig


class MicroscopeError(InvalidConfig):
    """Base class of everything the microscope refuses, in one line."""


class KernelArgumentError(MicroscopeError):
    """Not a CUDA kernel, the wrong number of arguments, or an argument of an unsupported type."""


class LaunchConfigError(MicroscopeError):
    """A launch the hardware rejects: too many threads, a dimension out of range, too much shared memory."""


class TraceTooLarge(MicroscopeError):
    """The launch is bigger than the microscope traces in reasonable time; raised before it runs."""


class BarrierError(MicroscopeError):
    """``syncthreads`` reached by only part of a block, or at different lines."""


class WarpSyncError(MicroscopeError):
    """A warp intrinsic used against its rules (mask without the caller, lanes that never arrive...)."""
