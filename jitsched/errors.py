"""Exception types of jitsched."""


class JitschedError(Exception):
    """Base class of every error jitsched raises on purpose."""


class ValidationError(JitschedError, ValueError):
    """Input that does not describe a valid cluster, job or workload.

    The message always names the offending field path or node id.
    """


class ExtensionNotBuiltError(JitschedError, ImportError):
    """A Cython kernel was imported before the package was compiled."""


def kernel_import_error(name: str, exc: ImportError) -> ExtensionNotBuiltError:
    """Return the one error raised when the compiled kernel ``name`` is missing."""
    return ExtensionNotBuiltError(
        f"the compiled kernel jitsched.{name} is not built ({exc}); "
        "install the package with `pip install .` (or `pip install -e .`), "
        "or build in place with `python setup.py build_ext --inplace`"
    )
