// Builds a DSL kernel and compiles it to PTX through the installed library.
#include <tokamax/compiler/Compiler.h>
#include <tokamax/dsl/Kernel.h>
#include <tokamax/jit/DslKernel.h>

#include <cstdio>

int main() {
  using namespace tokamax::dsl;
  Kernel k("scale");
  auto x = k.input("x", tokamax::DType::F32, {1000});
  auto y = k.output("y", tokamax::DType::F32, {1000});
  k.grid(cdiv(1000, 256));
  Value off = k.program_id(0) * 256;
  y.store({off}, x.load({off}, {256}) * 2.0);
  tokamax::CompileOptions options;
  options.assemble = false;
  tokamax::CompiledKernel compiled = tokamax::compile(k, options);
  bool ok = compiled.ptx.find(".entry scale") != std::string::npos;
  std::printf("consumer: %s\n", ok ? "compiled scale to PTX" : "no entry in PTX");
  return ok ? 0 : 1;
}
