"""libfuzzer_binary: a libFuzzer target built with clang, outside Bazel's gcc
toolchain.

Bazel's C++ toolchain here is gcc, which has no libFuzzer. This rule runs
`clang++ -fsanitize=fuzzer,address,undefined` directly: one action per source
file (so an edit recompiles one object) and one link action. The sources
are the fuzzer's own `srcs` plus every .cc of every cc_library in the
transitive closure of `deps` (collected by an aspect, generated .pb.cc files
included); headers, include paths, defines and link flags (the system
library wrappers' -l flags) come from the deps' CcInfo. So a new dependency
of server/shard.cc is picked up without touching fuzz/.

Without clang or its libFuzzer runtime (tools/setup.sh installs `clang
libclang-rt-14-dev`), the build still succeeds but the binary is a script
that explains this and exits 1, so the fuzz tests fail loudly rather than
pass silently.

    libfuzzer_binary(
        name = "shard_request_fuzzer",
        srcs = ["shard_request_fuzzer.cc"],
        deps = ["//server:shard"],
    )
"""

_SourcesInfo = provider(
    doc = "C++ sources of a cc_library and of everything it depends on.",
    fields = ["srcs"],
)

_CC_EXTENSIONS = ["cc", "cpp", "cxx", "c"]

def _collect_sources_impl(target, ctx):
    own = []
    if ctx.rule.kind == "cc_library":
        for src in getattr(ctx.rule.attr, "srcs", []):
            for f in src.files.to_list():
                if f.extension in _CC_EXTENSIONS:
                    own.append(f)
    transitive = [
        dep[_SourcesInfo].srcs
        for dep in getattr(ctx.rule.attr, "deps", [])
        if _SourcesInfo in dep
    ]
    return [_SourcesInfo(srcs = depset(own, transitive = transitive))]

_collect_sources = aspect(
    implementation = _collect_sources_impl,
    attr_aspects = ["deps"],
)

def _libfuzzer_binary_impl(ctx):
    cc_info = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps])
    comp = cc_info.compilation_context
    srcs = depset(
        ctx.files.srcs,
        transitive = [d[_SourcesInfo].srcs for d in ctx.attr.deps],
    ).to_list()

    flags = []
    for d in comp.defines.to_list():
        flags.append("-D" + d)
    for i in comp.quote_includes.to_list():
        flags += ["-iquote", i]
    for i in comp.includes.to_list():
        flags += ["-I", i]
    for i in comp.system_includes.to_list():
        flags += ["-isystem", i]

    objects = []
    for src in srcs:
        obj = ctx.actions.declare_file("_{}_objs/{}.o".format(ctx.label.name, src.short_path.replace("../", "external/")))
        args = ctx.actions.args()
        args.add("compile")
        args.add(obj)
        args.add(src)
        args.add_all(flags)
        ctx.actions.run(
            executable = ctx.executable._builder,
            arguments = [args],
            inputs = depset([src], transitive = [comp.headers]),
            outputs = [obj],
            mnemonic = "FuzzCompile",
            progress_message = "clang++ (libFuzzer) %s" % src.short_path,
            use_default_shell_env = True,
        )
        objects.append(obj)

    link_flags = []
    for li in cc_info.linking_context.linker_inputs.to_list():
        link_flags += li.user_link_flags
    out = ctx.actions.declare_file(ctx.label.name)
    args = ctx.actions.args()
    args.add("link")
    args.add(out)
    args.add_all(objects)
    args.add("--")
    args.add_all(link_flags)
    ctx.actions.run(
        executable = ctx.executable._builder,
        arguments = [args],
        inputs = objects,
        outputs = [out],
        mnemonic = "FuzzLink",
        progress_message = "linking libFuzzer target %s" % ctx.label,
        use_default_shell_env = True,
    )
    return [DefaultInfo(executable = out, files = depset([out]))]

libfuzzer_binary = rule(
    implementation = _libfuzzer_binary_impl,
    executable = True,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cc"]),
        "deps": attr.label_list(providers = [CcInfo], aspects = [_collect_sources]),
        "_builder": attr.label(
            default = "//fuzz:clang_fuzz_build.sh",
            executable = True,
            cfg = "exec",
            allow_single_file = True,
        ),
    },
)
