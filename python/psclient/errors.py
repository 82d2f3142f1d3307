"""The exceptions of psclient.

Every failure of a psclient call raises a subclass of `Error`; its message
names what failed (the field of a spec, the tensor, the shard or coordinator
address, the job) and `code` holds the gRPC/absl status code name, e.g.
"UNAVAILABLE".
"""


class Error(RuntimeError):
    """Base of every psclient error; `code` is the status code's name."""

    def __init__(self, message: str, code: str = "UNKNOWN") -> None:
        super().__init__(message)
        self.code = code


class InvalidSpec(Error):
    """The job spec was rejected; the message lists every problem."""


class Timeout(Error):
    """A deadline passed first (a started request carries on)."""


class Unavailable(Error):
    """The cluster could not be reached; the message names the address."""


class JobAborted(Error):
    """The job was cancelled or failed; the message names it and why."""


class ShapeError(Error):
    """A buffer or tensor was used with the wrong shape, dtype or layout."""


def native_import_error(err: ImportError) -> ImportError:
    """`err` from loading _native.so, with what to do when the module was
    built for another Python (pybind11's "Python version mismatch", or a
    CPython symbol this interpreter lacks): build it for this one."""
    import sys
    text = str(err)
    if "version mismatch" not in text and "undefined symbol: _Py" not in \
            text and "undefined symbol: Py" not in text:
        return err
    mine = "%d.%d" % sys.version_info[:2]
    return ImportError(
        f"psclient: the native module does not load in this Python ({mine}): "
        f"{text.rstrip('.')}; build it for this interpreter: python/build.sh "
        f"--python={mine} (docs/PYTHON.md)")
