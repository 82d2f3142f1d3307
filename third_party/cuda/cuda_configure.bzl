"""Finds the CUDA toolkit ($CUDA_HOME, else /usr/local/cuda) and NCCL, without downloading.

Creates @local_cuda with:
  defs.bzl   CUDA_ENABLED (bool), NVCC (absolute path, or ""), NCCL_ENABLED
             (bool) and NVCC_COPTS (the defines and include path that nvcc
             needs: the same PS_HAVE_* that //:cuda gives gcc)
  //:cuda    headers + cudart, cuBLAS and, when found, NCCL; defines
             PS_HAVE_CUDA=1 and, with NCCL, PS_HAVE_NCCL=1
This is the one place that decides whether NCCL is in the build: the code
tests PS_HAVE_NCCL, and -lnccl is linked exactly when it is defined.
NCCL counts as found when both nccl.h and libnccl.so are in one of: the
toolkit ($CUDA_HOME/include + lib64), $NCCL_HOME (include + lib), the
system (/usr/include + /usr/lib/x86_64-linux-gnu, as Debian's and NVIDIA's
libnccl-dev packages install it), or /usr/local (include + lib).
Without nvcc the repository still exists, CUDA_ENABLED is False, and the
project builds minus its CUDA targets.
"""

def _nccl_candidates(ctx, cuda_home):
    """(include dir, lib dir) pairs to look for NCCL in, in order."""
    out = [(cuda_home + "/include", cuda_home + "/lib64")]
    nccl_home = ctx.os.environ.get("NCCL_HOME", "")
    if nccl_home:
        out.append((nccl_home + "/include", nccl_home + "/lib"))
    out.append(("/usr/include", "/usr/lib/x86_64-linux-gnu"))
    out.append(("/usr/local/include", "/usr/local/lib"))
    return out

def _find_nccl(ctx, cuda_home):
    """Returns (include dir, lib dir) of the first complete NCCL, or None."""
    for include, lib in _nccl_candidates(ctx, cuda_home):
        header = ctx.path(include + "/nccl.h").exists
        library = (ctx.path(lib + "/libnccl.so").exists or
                   ctx.path(lib + "/libnccl.so.2").exists)
        if header and library:
            return (include, lib)
    return None

def _cuda_build_file(lib, nccl):
    defines = ['"PS_HAVE_CUDA=1"']
    libs = ['"-L{}"'.format(lib), '"-Wl,-rpath,{}"'.format(lib), '"-lcudart"', '"-lcublas"']
    if nccl:
        defines.append('"PS_HAVE_NCCL=1"')
        if nccl[1] != lib:
            libs += ['"-L{}"'.format(nccl[1]), '"-Wl,-rpath,{}"'.format(nccl[1])]

        # libnccl.so may be missing where only the versioned name is installed.
        libs.append('"-l:libnccl.so.2"')
    return """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda",
    hdrs = glob(["include/**"]),  # every header: <nv/target> and friends have no suffix
    includes = ["include"],
    defines = [{defines}],
    linkopts = [{libs}],
)
""".format(defines = ", ".join(defines), libs = ", ".join(libs))

def _cuda_configure_impl(ctx):
    cuda_home = ctx.os.environ.get("CUDA_HOME", "/usr/local/cuda")
    nvcc = ctx.path(cuda_home + "/bin/nvcc")
    enabled = nvcc.exists and ctx.path(cuda_home + "/include/cuda_runtime.h").exists
    nccl = _find_nccl(ctx, cuda_home) if enabled else None
    nvcc_copts = []
    if enabled:
        ctx.symlink(cuda_home + "/include", "include")
        ctx.file("BUILD.bazel", _cuda_build_file(cuda_home + "/lib64", nccl))
        nvcc_copts.append("-DPS_HAVE_CUDA=1")
        if nccl:
            nvcc_copts.append("-DPS_HAVE_NCCL=1")

            # The toolkit's and the system's include folders are searched anyway.
            if nccl[0] not in (cuda_home + "/include", "/usr/include"):
                nvcc_copts.append("-I" + nccl[0])
    else:
        ctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

# No CUDA toolkit was found: nothing depends on this (CUDA_ENABLED is False).
cc_library(name = "cuda")
""")
    ctx.file("defs.bzl", "\n".join([
        "CUDA_ENABLED = {}".format("True" if enabled else "False"),
        "NVCC = \"{}\"".format(str(nvcc) if enabled else ""),
        "NCCL_ENABLED = {}".format("True" if nccl else "False"),
        "NVCC_COPTS = {}".format(repr(nvcc_copts)),
        "",
    ]))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_HOME", "NCCL_HOME"],
    local = True,
)
