"""Finds the CUDA toolkit ($CUDA_HOME, else /usr/local/cuda) without downloading.

Creates @local_cuda with:
  defs.bzl   CUDA_ENABLED (bool) and NVCC (absolute path, or "")
  //:cuda    headers + cudart, cuBLAS and NCCL (only when CUDA_ENABLED)
Without nvcc the repository still exists, CUDA_ENABLED is False, and the
project builds minus its CUDA targets.
"""

def _cuda_configure_impl(ctx):
    cuda_home = ctx.os.environ.get("CUDA_HOME", "/usr/local/cuda")
    nvcc = ctx.path(cuda_home + "/bin/nvcc")
    enabled = nvcc.exists and ctx.path(cuda_home + "/include/cuda_runtime.h").exists
    if enabled:
        ctx.symlink(cuda_home + "/include", "include")
        lib = cuda_home + "/lib64"
        has_nccl = ctx.path(lib + "/libnccl.so").exists or ctx.path(cuda_home + "/include/nccl.h").exists
        ctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda",
    hdrs = glob(["include/**"]),  # every header: <nv/target> and friends have no suffix
    includes = ["include"],
    defines = ["PS_HAVE_CUDA=1"{nccl_define}],
    linkopts = [
        "-L{lib}",
        "-Wl,-rpath,{lib}",
        "-lcudart",
        "-lcublas",{nccl_lib}
    ],
)
""".format(
            lib = lib,
            nccl_define = ', "PS_HAVE_NCCL=1"' if has_nccl else "",
            nccl_lib = '\n        "-lnccl",' if has_nccl else "",
        ))
    else:
        ctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

# No CUDA toolkit was found: nothing depends on this (CUDA_ENABLED is False).
cc_library(name = "cuda")
""")
    ctx.file("defs.bzl", "CUDA_ENABLED = {}\nNVCC = \"{}\"\n".format(
        "True" if enabled else "False",
        str(nvcc) if enabled else "",
    ))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_HOME"],
    local = True,
)
