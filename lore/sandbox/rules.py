"""What feature code may use: the allow-lists and deny-lists of the sandbox.

Both enforcement points read these: the static check (:mod:`lore.sandbox.checker`) refuses code that
names anything outside them, and the restricted namespace (:mod:`lore.sandbox.namespace`) holds
nothing else at run time. Standard library only: the worker process loads this module too.
"""

from __future__ import annotations

import math

ALLOWED_MODULES = ("math", "numpy")

# numpy functions and constants feature code may use (an allow-list: numpy has file I/O, ctypes and
# raw-memory entry points - np.load/save/fromfile/memmap, np.ctypeslib, np.lib.stride_tricks - and a
# deny-list would silently let the next release's additions through). No np.random: features must
# be a deterministic function of the observation.
NUMPY_ALLOWED = frozenset(
    """
    abs absolute add all allclose amax amin any append arange arccos arccosh arcsin arcsinh arctan
    arctan2 arctanh argmax argmin argsort argwhere around array array_equal asarray atleast_1d
    atleast_2d atleast_3d average bincount bitwise_and bitwise_not bitwise_or bitwise_xor bool bool_
    broadcast_to cbrt ceil clip column_stack concatenate copy cos cosh count_nonzero cross cumprod
    cumsum deg2rad degrees diag diagonal diff digitize divide dot dstack e einsum equal exp exp2 expand_dims expm1 eye fabs flatnonzero flip fliplr flipud float16 float32 float64
    floor floor_divide fmax fmin fmod full full_like gcd greater greater_equal heaviside histogram
    hstack hypot identity inf inner int8 int16 int32 int64 intp invert isclose isfinite isin isinf
    isnan kron lcm less less_equal linalg linspace log log10 log1p log2 logaddexp logical_and
    logical_not logical_or logical_xor matmul max maximum mean median meshgrid min minimum mod
    moveaxis multiply nan nan_to_num nanargmax nanargmin nanmax nanmean nanmedian nanmin nanpercentile
    nanquantile nanstd nansum nanvar ndim negative newaxis nonzero not_equal ones ones_like outer pad
    percentile pi positive power prod ptp quantile rad2deg radians ravel ravel_multi_index reciprocal
    remainder repeat reshape rint roll rot90 round searchsorted sign sin sinh size sort split sqrt
    square squeeze stack std subtract sum swapaxes take tan tanh tile trace transpose tril triu
    true_divide trunc uint8 uint16 uint32 uint64 unique unravel_index var vstack where zeros
    zeros_like
    """.split()
)
NUMPY_LINALG_ALLOWED = frozenset("cond det eigvals eigvalsh inv lstsq matrix_rank norm pinv solve".split())

SAFE_BUILTIN_NAMES = (
    "abs all any bool chr dict divmod enumerate filter float frozenset int isinstance iter len list "
    "map max min next ord pow range repr reversed round set slice sorted str sum tuple zip"
).split()
SAFE_EXCEPTION_NAMES = (
    "ArithmeticError AssertionError Exception FloatingPointError IndexError KeyError LookupError "
    "NotImplementedError OverflowError RuntimeError StopIteration TypeError ValueError "
    "ZeroDivisionError"
).split()

# Names that give a way out of a restricted namespace or into the host. They are absent from the
# worker's builtins anyway; naming them here turns a runtime NameError into a clear rejection.
FORBIDDEN_NAMES = frozenset(
    """
    eval exec compile open getattr setattr delattr hasattr globals locals vars input breakpoint help
    exit quit memoryview type object super classmethod staticmethod property dir id hash print bytearray
    BaseException SystemExit KeyboardInterrupt GeneratorExit
    """.split()
)
# Attribute names refused on any object (the checker cannot know types). Besides everything that
# starts with "_" (dunders: __class__, __globals__, __subclasses__ ...) these reach frames, code,
# files or the modules of the host. `data`/`tobytes`/`tostring` give an array's raw bytes, which for
# an object array are its elements' memory addresses.
FORBIDDEN_ATTRIBUTES = frozenset(
    """
    format format_map mro tofile dump dumps ctypes data tobytes tostring load loads save savez
    savez_compressed savetxt loadtxt genfromtxt fromfile memmap lib ctypeslib testing distutils f2py
    setflags resize environ modules system popen spawn fork builtins globals locals getattr setattr
    import_module
    """.split()
)
FORBIDDEN_ATTRIBUTE_PREFIXES = ("_", "f_", "co_", "gi_", "cr_", "ag_", "tb_", "func_", "im_")


def math_public_names() -> frozenset[str]:
    """Every public name of :mod:`math` (the whole module is allowed)."""
    return frozenset(n for n in dir(math) if not n.startswith("_"))
