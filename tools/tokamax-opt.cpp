// tokamax-opt: runs tile-dialect passes on .mlir files, like mlir-opt.
#include <tokamax/compiler/Compiler.h>

int main(int argc, char **argv) { return tokamax::run_opt_main(argc, argv); }
