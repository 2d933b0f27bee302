# -*- Python -*-
#
# lit configuration of the tile IR FileCheck tests. RUN lines call `tokamax-opt` and
# `FileCheck` (and `not`) by name: their directories are put first on PATH. CMake writes
# lit.site.cfg.py into the build tree (tests/ir/) with the tools' locations and then
# loads this file; run `lit -sv <build>/tests/ir` (or `ctest -R ir-tests`).
#
# Without the site config (lit run on the source tree), the tools are taken from
# $TOKAMAX_OPT_DIR and $TOKAMAX_LLVM_BIN (default /usr/lib/llvm-22/bin).

import os
import tempfile

import lit.formats

config.name = "Tokamax IR"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "lit.site.cfg.py.in"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))

# Scratch output goes to the build tree (or a temporary directory), never the sources.
obj_root = getattr(config, "tokamax_ir_obj_root", None) or os.path.join(
    tempfile.gettempdir(), "tokamax-ir-tests")
config.test_exec_root = obj_root

opt_dir = getattr(config, "tokamax_opt_dir", None) or os.environ.get("TOKAMAX_OPT_DIR")
llvm_bin = getattr(config, "llvm_tools_dir", None) or os.environ.get(
    "TOKAMAX_LLVM_BIN", "/usr/lib/llvm-22/bin")
filecheck_dir = getattr(config, "filecheck_dir", None) or llvm_bin

if not opt_dir or not os.path.isfile(os.path.join(opt_dir, "tokamax-opt")):
    lit_config.fatal(
        "tokamax-opt not found (looked in %r): build it first (ninja tokamax-opt), run lit on "
        "<build>/tests/ir, or set TOKAMAX_OPT_DIR" % (opt_dir,))
if not os.path.isfile(os.path.join(filecheck_dir, "FileCheck")):
    lit_config.fatal("FileCheck not found in %r: install llvm-22-tools or set TOKAMAX_LLVM_BIN"
                     % (filecheck_dir,))

path = [opt_dir, filecheck_dir, llvm_bin, config.environment.get("PATH", os.environ.get("PATH", ""))]
config.environment["PATH"] = os.pathsep.join(p for p in path if p)

# Explicit spellings, for RUN lines that want them.
config.substitutions.append(("%tokamax_opt", os.path.join(opt_dir, "tokamax-opt")))
config.substitutions.append(("%FileCheck", os.path.join(filecheck_dir, "FileCheck")))

# A crashing tool should fail fast, without trying to symbolize its stack trace.
config.environment["LLVM_DISABLE_SYMBOLIZATION"] = "1"
