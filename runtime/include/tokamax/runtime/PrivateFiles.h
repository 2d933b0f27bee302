//===- PrivateFiles.h - Directories and files only this user can touch -*- C++ -*-===//
//
// The kernel cache holds code the library runs and the autotuning cache configs it
// trusts, so both live in directories only their owner can write: created 0700, and
// refused (with the reason) when another user owns them or may write to them, since
// whoever can write an entry there chooses what runs. Entry files are opened without
// following symbolic links and must belong to this user.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/Export.h>

#include <filesystem>
#include <string>

namespace tokamax::private_files {

/// Why `dir` may not hold this user's private cache, or "" when it may: it must exist,
/// be a directory (a symbolic link to one is followed) owned by this user, and not be
/// writable by its group or others.
TOKAMAX_API std::string why_untrusted(const std::filesystem::path &dir);

/// Creates `dir` and its missing parents with mode 0700, then checks `dir` with
/// why_untrusted(); returns "" or the reason it cannot be used.
TOKAMAX_API std::string make_private_directory(const std::filesystem::path &dir);

/// Opens an existing file for reading without following a symbolic link in its last
/// component; it must be a regular file owned by this user. Returns the descriptor, or
/// -1 with errno set (ENOENT for a miss) and `why` naming any other refusal.
TOKAMAX_API int open_private_file(const std::filesystem::path &path, std::string &why);

/// A fresh directory /tmp/<prefix>XXXXXX made with mkdtemp (0700, a name no other user
/// can predict); empty on failure.
TOKAMAX_API std::filesystem::path make_private_temp_directory(const std::string &prefix);

} // namespace tokamax::private_files
