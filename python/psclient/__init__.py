"""psclient: the Python client of the parameter server.

    import psclient
    c = psclient.connect(cluster="configs/local/cluster.pbtxt")
    job_id, joined = c.submit(spec_text, join_existing=True)
    with c.join(job_id) as w:
        w.pull(0)
        ... compute into w.grads from w.params ...
        w.push_pull(0)

See docs/PYTHON.md. The native core (_native.so) is built by Bazel;
python/build.sh builds it and puts it beside these files.
"""

import os as _os

_here = _os.path.dirname(_os.path.abspath(__file__))
if not _os.path.exists(_os.path.join(_here, "_native.so")):
    # Elsewhere (PSCLIENT_NATIVE_DIR), or not built: python/build.sh builds
    # it and puts it here.
    _elsewhere = _os.environ.get("PSCLIENT_NATIVE_DIR", "")
    if not _os.path.exists(_os.path.join(_elsewhere, "_native.so")):
        raise ImportError(
            f"psclient: {_here}/_native.so is not built; run python/build.sh "
            "(or set PSCLIENT_NATIVE_DIR to the folder that holds it)")
    __path__.append(_elsewhere)  # noqa: F821 (the package's own __path__)

from psclient.errors import (Error, InvalidSpec, JobAborted,  # noqa: E402
                             ShapeError, Timeout, Unavailable,
                             native_import_error)

try:
    from psclient.client import Client, Worker, connect, export  # noqa: E402
except ImportError as _e:
    raise native_import_error(_e) from _e

__all__ = [
    "Client", "Error", "InvalidSpec", "JobAborted", "ShapeError", "Timeout",
    "Unavailable", "Worker", "connect", "export",
]
