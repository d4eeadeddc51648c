# Cross-compiling gpufrac for arm64 (aarch64, Grace Hopper nodes) on a
# Debian amd64 machine: Debian's cross compiler (crossbuild-essential-arm64)
# and the arm64 libraries of dpkg's multiarch (libcurl4-openssl-dev:arm64
# ... in /usr/lib/aarch64-linux-gnu; scripts/install-deps installs both).
#   cmake -S . -B build-arm64 --toolchain cmake/toolchain-aarch64.cmake
# scripts/build-images builds its arm64 images from such a directory.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
# Found first so that a machine without the cross compiler gets the fix, not
# CMake's generic "not found in the PATH".
find_program(GF_AARCH64_GCC aarch64-linux-gnu-gcc)
if(NOT GF_AARCH64_GCC)
  message(FATAL_ERROR "aarch64-linux-gnu-gcc not found on PATH: the arm64 cross "
    "build needs Debian's crossbuild-essential-arm64 and the :arm64 libraries "
    "(scripts/install-deps installs them); or build the amd64 images only: "
    "scripts/build-images --arch amd64")
endif()
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# pkg-config for the target: Debian's aarch64-linux-gnu-pkg-config reads
# only /usr/lib/aarch64-linux-gnu/pkgconfig and /usr/share/pkgconfig.
set(PKG_CONFIG_EXECUTABLE aarch64-linux-gnu-pkg-config CACHE FILEPATH "")
# Programs (protoc-c) are this machine's; libraries and headers the target's.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
