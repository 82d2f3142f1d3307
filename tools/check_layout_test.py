#!/usr/bin/env python3
"""Tests tools/check_layout.py on small git trees made in a temporary folder."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "check_layout.py")


def function_of(lines: int, name: str = "Long") -> str:
    body = "".join(f"  x += {i};\n" for i in range(lines - 2))
    return f"int {name}(int x) {{\n{body}}}\n"


class CheckLayoutTest(unittest.TestCase):
    def run_on(self, files: dict) -> subprocess.CompletedProcess:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        root = tmp.name
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        subprocess.run(["git", "init", "-q", root], check=True)
        subprocess.run(["git", "-C", root, "add", "."], check=True)
        return subprocess.run([sys.executable, SCRIPT, "--root", root],
                              capture_output=True, text=True)

    def test_a_clean_tree_passes(self):
        r = self.run_on({"server/a.cc": function_of(80), "docs/X.md": "see server/a.cc\n"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("none over 600 lines", r.stdout)

    def test_a_function_of_81_lines_fails(self):
        r = self.run_on({"server/a.cc": "namespace ps {\n" + function_of(81) + "}\n"})
        self.assertEqual(r.returncode, 1)
        self.assertIn("server/a.cc:2: function of 81 lines", r.stderr)

    def test_methods_constructors_and_lambdas_count(self):
        ctor = "A::A(int v)\n    : v_(v) {\n" + "  v_++;\n" * 85 + "}\n"
        method = "void A::F() const {\n" + "  g();\n" * 85 + "}\n"
        lam = "auto f = [](int x) -> int {\n" + "  x++;\n" * 85 + "  return x;\n};\n"
        r = self.run_on({"worker/a.cc": ctor, "worker/b.cc": method, "worker/c.cc": lam})
        self.assertEqual(r.returncode, 1)
        for f in ("worker/a.cc:2", "worker/b.cc:1", "worker/c.cc:1"):
            self.assertIn(f + ": function of", r.stderr)

    def test_namespaces_classes_and_control_blocks_do_not_count(self):
        long_class = "class A {\n" + "".join(
            f"  int m{i};\n" for i in range(100)) + "};\n"
        long_if = "void F(bool b) {\n  if (b) {\n" + "    g();\n" * 70 + "  }\n}\n"
        r = self.run_on({"core/a.h": long_class, "core/b.cc": long_if})
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_braces_in_strings_and_comments_are_ignored(self):
        text = ('int F() {\n  const char* s = "}}}";\n  // }\n  /* { */\n'
                '  return R"x({{)x"[0];\n}\n' + function_of(30, "G"))
        r = self.run_on({"core/a.cc": text})
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_file_over_600_lines_fails_unless_it_is_a_test(self):
        big = "// x\n" * 601
        r = self.run_on({"common/big.cc": big, "common/big_test.cc": big,
                         "server/testing/fake.cc": big})
        self.assertEqual(r.returncode, 1)
        self.assertIn("common/big.cc: 601 lines", r.stderr)
        self.assertNotIn("big_test", r.stderr)
        self.assertNotIn("fake.cc", r.stderr)

    def test_a_stale_path_fails(self):
        r = self.run_on({"docs/A.md": "Read server/gone.h and [B](B.md).\n",
                         "core/x.h": "// see worker/old/thing.cc\n#include \"server/inc.h\"\n"})
        self.assertEqual(r.returncode, 1)
        self.assertIn("docs/A.md:1: names server/gone.h", r.stderr)
        self.assertIn("docs/A.md:1: links to B.md", r.stderr)
        self.assertIn("core/x.h:1: names worker/old/thing.cc", r.stderr)
        self.assertNotIn("server/inc.h", r.stderr)  # include lines: the compiler's job


if __name__ == "__main__":
    unittest.main()
