// dlsym_hook.h - the two halves of luma's dlsym: dlsym_hook.cpp exports dlsym itself and
// finds glibc's; hooks.cpp answers the names of driver entry points luma serves.
#pragma once

#include "driver/real_driver.h"

namespace luma::shim {

// In hooks.cpp: `name` starts with "cu" and the calling thread is not inside luma.
void* dlsym_for_driver(void* handle, const char* name, DlsymFn real) noexcept;

}  // namespace luma::shim
