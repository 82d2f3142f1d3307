"""embed_text: a text file as a C++ string constant in a generated header."""

def embed_text(name, src, out, symbol, visibility = None):
    """Writes `out`, a header defining `inline constexpr char SYMBOL[]`.

    The constant (in namespace ps) holds `src` verbatim, as a raw string
    literal; `src` must not contain the delimiter `)psembed"`.
    """
    native.genrule(
        name = name,
        srcs = [src],
        outs = [out],
        cmd = ("if grep -q ')psembed\"' $<; then " +
               "echo '$< contains the delimiter' >&2; exit 1; fi; " +
               "(echo '// Generated from $(location " + src + ") by " +
               "embed_text (common/embed.bzl). Do not edit.'; " +
               "echo '#pragma once'; " +
               "echo 'namespace ps {'; " +
               "echo 'inline constexpr char " + symbol + "[] = R\"psembed('; " +
               "cat $<; " +
               "echo ')psembed\";'; " +
               "echo '}  // namespace ps') > $@"),
        visibility = visibility,
    )
