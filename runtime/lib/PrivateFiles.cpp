//===- PrivateFiles.cpp - Directories and files only this user can touch -----===//
#include <tokamax/runtime/PrivateFiles.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tokamax::private_files {

namespace fs = std::filesystem;

std::string why_untrusted(const fs::path &dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0)
    return fmt::format("cannot stat {}: {}", dir.string(), std::strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return fmt::format("{} is not a directory", dir.string());
  if (st.st_uid != ::geteuid())
    return fmt::format("{} is owned by uid {}, not by this user (uid {})", dir.string(), st.st_uid, ::geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return fmt::format("{} is writable by its group or by others (mode {:o})", dir.string(), st.st_mode & 07777);
  return "";
}

std::string make_private_directory(const fs::path &dir) {
  // Each missing component from the top down, so every directory made here is 0700
  // whatever the umask.
  std::vector<fs::path> missing;
  std::error_code ec;
  for (fs::path p = dir; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path())
      break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0700) != 0) {
      if (errno != EEXIST)
        return fmt::format("cannot create {}: {}", it->string(), std::strerror(errno));
      continue;  // made meanwhile (by another thread or process): checked below
    }
    if (::chmod(it->c_str(), 0700) != 0)
      return fmt::format("cannot make {} private: {}", it->string(), std::strerror(errno));
  }
  return why_untrusted(dir);
}

int open_private_file(const fs::path &path, std::string &why) {
  why.clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    if (err == ELOOP)
      why = fmt::format("{} is a symbolic link", path.string());
    errno = err;
    return -1;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0)
    why = fmt::format("cannot stat {}: {}", path.string(), std::strerror(errno));
  else if (!S_ISREG(st.st_mode))
    why = fmt::format("{} is not a regular file", path.string());
  else if (st.st_uid != ::geteuid())
    why = fmt::format("{} is owned by uid {}, not by this user (uid {})", path.string(), st.st_uid, ::geteuid());
  if (!why.empty()) {
    ::close(fd);
    errno = EPERM;
    return -1;
  }
  // Back to blocking reads (O_NONBLOCK only kept a planted FIFO from hanging the open).
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

fs::path make_private_temp_directory(const std::string &prefix) {
  std::string pattern = "/tmp/" + prefix + "XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (!::mkdtemp(buffer.data()))
    return {};
  return fs::path(buffer.data());
}

} // namespace tokamax::private_files
