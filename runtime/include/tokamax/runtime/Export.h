//===- Export.h - Symbol visibility for the public API ------------*- C++ -*-===//
//
// libtokamax is built with -fvisibility=hidden; everything users may name is marked
// TOKAMAX_API so that its symbols, typeinfo and vtables are exported.
//
//===----------------------------------------------------------------------===//
#pragma once

#define TOKAMAX_API __attribute__((visibility("default")))
