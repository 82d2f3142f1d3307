"""The CUDA backend's targets, declared only when the toolkit was found.

BUILD files cannot branch at top level, so the package calls this macro.
"""

load("//third_party/cuda:defs.bzl", "CUDA_ENABLED", "cuda_library")

# PTX for compute_75 (any GPU from Turing on, via JIT) plus ready SASS for
# A100 and H100/H200.
NVCC_ARCH = [
    "-gencode=arch=compute_75,code=compute_75",
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
]

def cuda_backend_targets():
    """Declares :cuda_kernels (kernels + cuBLAS/NCCL wrappers), :cuda_backend, :gpu_reducer, the gpu tests and the GPU check's benchmark."""
    if not CUDA_ENABLED:
        return
    cuda_library(
        name = "cuda_kernels",
        srcs = [
            "cuda_kernels.cu",
            "cuda_libs.cu",
        ],
        hdrs = [
            "cuda_kernels.h",
            "cuda_libs.h",
        ],
        copts = NVCC_ARCH,
        visibility = ["//visibility:private"],
        nvcc_hdrs = ["//worker/backend:elementwise.h"],
        deps = ["//worker/backend:elementwise"],
    )

    native.cc_library(
        name = "cuda_backend",
        srcs = ["cuda_backend.cc"],
        hdrs = ["cuda_backend.h"],
        visibility = ["//worker/backend:__subpackages__"],
        deps = [
            ":cuda_kernels",
            "//common:status_macros",
            "//third_party:absl",
            "//third_party:cuda",
            "//worker/backend",
            "//worker/backend:arg_checks",
        ],
    )

    native.cc_library(
        name = "gpu_reducer",
        srcs = ["gpu_reducer.cc"],
        hdrs = ["gpu_reducer.h"],
        visibility = ["//worker/backend:__subpackages__"],
        deps = [
            ":cuda_backend",
            "//common:status_macros",
            "//third_party:absl",
            "//third_party:cuda",
            "//worker/backend",
        ],
    )

    native.cc_test(
        name = "cuda_backend_test",
        size = "small",
        srcs = ["cuda_backend_test.cc"],
        tags = ["gpu"],
        deps = [
            ":cuda_backend",
            ":gpu_reducer",
            "//third_party:absl",
            "//third_party:gtest_main",
            "//worker/backend",
            "//worker/backend/cpu:cpu_backend",
        ],
    )

    native.cc_test(
        name = "cuda_conv_test",
        size = "small",
        srcs = ["cuda_conv_test.cc"],
        tags = ["gpu"],
        deps = [
            ":cuda_backend",
            "//third_party:absl",
            "//third_party:gtest_main",
            "//worker/backend",
            "//worker/backend/cpu:cpu_backend",
        ],
    )

    native.cc_test(
        name = "cuda_embedding_bag_test",
        size = "small",
        srcs = ["cuda_embedding_bag_test.cc"],
        tags = ["gpu"],
        deps = [
            ":cuda_backend",
            "//third_party:absl",
            "//third_party:gtest_main",
            "//worker/backend",
            "//worker/backend/cpu:cpu_backend",
            "//worker/backend/testing:embedding_bag_test_util",
        ],
    )

    # The GPU check (tools/gpu_check.sh): the CUDA backend against the CPU
    # backend on the MLP's and the CNN's calls and models, and Backend::Gemm
    # against cuBLAS, as JSON. testonly: it draws its models' parameters and
    # data with //worker/model/testing:model_test_util.
    native.cc_library(
        name = "gpu_cpu_compare",
        testonly = True,
        srcs = ["gpu_cpu_compare.cc"],
        hdrs = ["gpu_cpu_compare.h"],
        visibility = ["//visibility:private"],
        deps = [
            "//common:status_macros",
            "//core:model_spec",
            "//third_party:absl",
            "//worker/backend",
            "//worker/model",
            "//worker/model/testing:model_test_util",
        ],
    )

    # The comparison run CPU against the GPU-like DeferredBackend: every
    # figure 0, so a harness fault (an output never compared, a read before
    # Synchronize) shows here, without a GPU.
    native.cc_test(
        name = "gpu_cpu_compare_test",
        # About 30 s on one core: the CNN's calls and model on the CPU, twice.
        size = "medium",
        srcs = ["gpu_cpu_compare_test.cc"],
        deps = [
            ":gpu_cpu_compare",
            "//third_party:absl",
            "//third_party:gtest_main",
            "//worker/backend",
            "//worker/backend:deferred_backend",
            "//worker/backend/cpu:cpu_backend",
        ],
    )

    native.cc_library(
        name = "step_time",
        testonly = True,
        srcs = ["step_time.cc"],
        hdrs = ["step_time.h"],
        visibility = ["//visibility:private"],
        deps = [
            "//common:status_macros",
            "//core:model_spec",
            "//third_party:absl",
            "//worker/backend",
            "//worker/model",
            "//worker/model/testing:model_test_util",
        ],
    )

    native.cc_library(
        name = "gemm_rate",
        testonly = True,
        srcs = ["gemm_rate.cc"],
        hdrs = ["gemm_rate.h"],
        visibility = ["//visibility:private"],
        deps = [
            "//common:status_macros",
            "//third_party:absl",
            "//third_party:cuda",
            "//worker/backend",
        ],
    )

    native.cc_binary(
        name = "gpu_check_benchmark",
        testonly = True,
        srcs = ["gpu_check_benchmark.cc"],
        tags = ["gpu"],
        visibility = ["//visibility:private"],
        deps = [
            ":gemm_rate",
            ":gpu_cpu_compare",
            ":step_time",
            "//common:json_string",
            "//common:status_macros",
            "//third_party:absl",
            "//third_party:cuda",
            "//worker/backend",
            "//worker/backend:backend_factory",
        ],
    )
