"""Exception types of jitsched, and the one loader of its compiled kernels."""

from __future__ import annotations

import functools
import importlib
from types import ModuleType


class JitschedError(Exception):
    """Base class of every error jitsched raises on purpose."""


class ValidationError(JitschedError, ValueError):
    """Input that does not describe a valid cluster, job or workload.

    The message always names the offending field path or node id.
    """


class ExtensionNotBuiltError(JitschedError, ImportError):
    """A Cython kernel was imported before the package was compiled."""


class ProtocolError(JitschedError):
    """A message that cannot be accepted; ``code`` is one of :class:`jitsched.protocol.ErrorCode`.

    Importable from :mod:`jitsched.protocol` too, where the wire format raises it.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class RemoteError(JitschedError):
    """An error reply received from the peer (client side): its ``code``, ``message`` and
    ``detail`` (a map, empty unless the reply has one).

    Importable from :mod:`jitsched.protocol` and :mod:`jitsched.client` too.
    """

    def __init__(self, code: str, message: str, detail: dict | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.detail = dict(detail or {})


def kernel_import_error(name: str, exc: ImportError) -> ExtensionNotBuiltError:
    """Return the one error raised when the compiled kernel ``name`` is missing."""
    return ExtensionNotBuiltError(
        f"the compiled kernel jitsched.{name} is not built ({exc}); "
        "install the package with `pip install .` (or `pip install -e .`), "
        "or build in place with `python setup.py build_ext --inplace`"
    )


@functools.cache
def load_kernel(name: str) -> ModuleType:
    """The compiled kernel module ``jitsched.<name>`` (e.g. ``"_lat"``), imported once.

    Raises
    ------
    ExtensionNotBuiltError
        The extension was not compiled; the message says how to build it.
    """
    try:
        return importlib.import_module(f"jitsched.{name}")
    except ImportError as exc:
        raise kernel_import_error(name, exc) from exc
