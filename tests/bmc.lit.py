# lit configuration for bmc: one suite over the source tree's lit tests.
import os

import lit.formats

config.name = "bmc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.test_source_root = config.bmc_src_root
config.test_exec_root = os.path.join(config.bmc_obj_root, "tests")
# Only these folders hold lit tests; the rest of the tree (build, venvs,
# model files) is not scanned.
config.excludes = ["build", "build-fuzz", "fuzz", ".venv", ".venv-export", ".git", "models", "bench",
                   "scripts", "runtime", "CMakeFiles"]

bin_dir = os.path.join(config.bmc_obj_root, "bin")
config.environment["PATH"] = os.pathsep.join(
    [bin_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ["PATH"])])
config.substitutions.append(("%models", os.path.join(config.bmc_src_root, "models", "onnx")))
config.substitutions.append(("%python", config.python_executable))
config.substitutions.append(("%testdata", os.path.join(config.bmc_src_root, "tests", "data")))
