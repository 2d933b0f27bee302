//===- FmtCompiled.cpp - fmt's compiled part, once for libtokamax_runtime ---===//
//
// libtokamax_runtime uses fmt in its compiled mode, not header-only: header-only fmt
// gives every source file its own hidden copy of the formatting code (about a third of
// this library's size). The definitions and instantiations are made here once, as fmt's
// own src/format.cc makes them (a missing one fails the link: -z defs).
//
//===----------------------------------------------------------------------===//
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {

template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;
template FMT_API locale_ref::locale_ref(const std::locale &loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API void buffer<char>::append(const char *, const char *);
template FMT_API void vformat_to(buffer<char> &, string_view, basic_format_args<FMT_BUFFER_CONTEXT(char)>,
                                 locale_ref);

} // namespace detail
FMT_END_NAMESPACE
