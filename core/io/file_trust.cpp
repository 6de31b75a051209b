// file_trust.cpp - see file_trust.h.
#include "io/file_trust.h"

#include <cstdio>

namespace luma::core {

std::string untrusted_file_reason(const struct stat& st, unsigned uid) {
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  if (st.st_uid != uid)
    return "is owned by uid " + std::to_string(st.st_uid) + ", not " + std::to_string(uid);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return std::string("is writable by ") + ((st.st_mode & S_IWOTH) != 0 ? "others" : "its group") +
           " (mode " + mode + ")";
  }
  return "";
}

}  // namespace luma::core
