// Whether this build runs under AddressSanitizer (clang's __has_feature, or
// gcc's __SANITIZE_ADDRESS__): a kernel's out-of-bounds read is then a report
// that ends the process.
#pragma once

namespace kprop {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace kprop
