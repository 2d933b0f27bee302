//===- OptMain.cpp - The body of tokamax-opt --------------------------------===//
#include <tokamax/compiler/Compiler.h>

#include "compiler/lib/Context.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"

namespace tokamax {

int run_opt_main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  compiler_detail::registerAll(registry);
  compiler_detail::registerPasses();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "Tokamax tile IR optimizer\n", registry));
}

} // namespace tokamax
