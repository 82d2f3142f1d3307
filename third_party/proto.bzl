"""ps_proto_library: one cc_library per .proto, generated with the system
protoc and grpc_cpp_plugin (Debian protobuf-compiler, protobuf-compiler-grpc).

Imports are written from the workspace root (import "proto/cluster.proto");
list every imported .proto's ps_proto_library in deps.
"""

def ps_proto_library(name, src, deps = [], grpc = False, visibility = None):
    base = src[:-len(".proto")]
    outs = [base + ".pb.h", base + ".pb.cc"]
    if grpc:
        outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    dep_srcs = [d + "_proto_srcs" for d in deps]
    native.filegroup(
        name = name + "_proto_srcs",
        srcs = [src] + dep_srcs,
        visibility = visibility,
    )
    grpc_flags = ""
    if grpc:
        grpc_flags = "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin"
    native.genrule(
        name = name + "_codegen",
        srcs = [src] + dep_srcs,
        outs = outs,
        cmd = "/usr/bin/protoc -I. --cpp_out=$(GENDIR) {} $(location {})".format(grpc_flags, src),
        message = "protoc " + src,
    )
    lib_deps = deps + ["//third_party:protobuf"]
    if grpc:
        lib_deps.append("//third_party:grpc")
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = lib_deps,
        copts = ["-Wno-unused-parameter"],
        visibility = visibility,
    )
