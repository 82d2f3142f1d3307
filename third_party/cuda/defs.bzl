"""cuda_library: compiles .cu files with nvcc into a cc_library.

Only call it under `if CUDA_ENABLED:` (re-exported here). nvcc gets the same
PS_HAVE_CUDA / PS_HAVE_NCCL defines as the gcc-compiled code. Each .cu file becomes
one position-independent object; the objects, the headers and the CUDA runtime
form a cc_library that ordinary C++ targets depend on.
"""

load(
    "@local_cuda//:defs.bzl",
    _CUDA_ENABLED = "CUDA_ENABLED",
    _NCCL_ENABLED = "NCCL_ENABLED",
    _NVCC = "NVCC",
    _NVCC_COPTS = "NVCC_COPTS",
)

CUDA_ENABLED = _CUDA_ENABLED

# Whether cuda_configure found NCCL (headers and library); the code sees it
# as PS_HAVE_NCCL, in gcc- and nvcc-compiled files alike.
NCCL_ENABLED = _NCCL_ENABLED

def cuda_library(name, srcs, hdrs = [], deps = [], nvcc_hdrs = [], copts = [], **kwargs):
    """srcs: .cu files. nvcc_hdrs: headers the .cu files include (project-relative)."""
    objs = []
    for src in srcs:
        obj = "_objs_{}/{}".format(name, src.replace(".cu", ".pic.o"))
        native.genrule(
            name = "{}_{}_nvcc".format(name, src.replace("/", "_").replace(".", "_")),
            srcs = [src] + hdrs + nvcc_hdrs,
            outs = [obj],
            cmd = " ".join([
                _NVCC,
                "-std=c++17 -O2 -Xcompiler -fPIC -Xcompiler -Wall",
                "-I. -I$(GENDIR)",
                # The PS_HAVE_* defines that //third_party:cuda gives gcc.
                " ".join(_NVCC_COPTS),
                " ".join(copts),
                "-c $(location {}) -o $@".format(src),
            ]),
            message = "nvcc " + src,
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["//third_party:cuda"],
        **kwargs
    )
