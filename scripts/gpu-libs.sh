# shellcheck shell=bash
# gpu-libs.sh: sourced by gpu-bundle.sh and gpu-check.sh: unpacking a bundle's
# libraries (gpu_unpack_libs, at the end), and which shared libraries a
# GPU machine provides itself, so that a bundle neither carries them nor is
# expected to: glibc's, the C++ runtime (libstdc++, libgcc_s) and CUDA's (the
# driver, cudart, cuBLAS, cuDNN, cuRAND, NCCL, NVRTC, nvJitLink; from the CUDA
# toolkit or Python's NVIDIA wheels).
#   gpu_provided_lib SONAME    exit status 0 when provided
gpu_provided_lib() {
  case $1 in
    linux-vdso.so*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*|libutil.so*) return 0 ;;
    libstdc++.so*|libgcc_s.so*) return 0 ;;
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libcudnn*.so*|libcurand.so*|libnccl.so*|libnvrtc*.so*|libnvJitLink.so*) return 0 ;;
  esac
  return 1
}

# gpu_libs_outside DIR... < ldd output: prints "missing: SONAME" for each library
# not found and "outside: SONAME (PATH)" for each one resolved outside the DIRs
# that is not provided; prints nothing when the programs are self-contained.
gpu_libs_outside() {
  local dirs=("$@")
  awk '/not found/ {print "missing:", $1; next}
       $2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r name path; do
      if [ "$name" = missing: ]; then echo "missing: $path"; continue; fi
      local d inside=0
      for d in "${dirs[@]}"; do
        case $path in "$d"/*) inside=1 ;; esac
      done
      [ "$inside" = 1 ] || gpu_provided_lib "$name" || echo "outside: $name ($path)"
    done
}

# gpu_unpack_libs BUNDLE DEST: the bundle's lib/ copied into DEST, its .xz files
# unpacked (by xz, else by python3's lzma); non-zero with a message when neither
# is there.
gpu_unpack_libs() {
  cp "$1"/lib/* "$2/" 2>/dev/null
  local f
  for f in "$2"/*.xz; do
    [ -e "$f" ] || continue
    if command -v xz >/dev/null; then xz -d "$f" || return 1
    elif command -v python3 >/dev/null; then
      python3 -c 'import lzma,sys; open(sys.argv[1][:-3],"wb").write(lzma.open(sys.argv[1]).read())' "$f" &&
        rm "$f" || return 1
    else
      echo "neither xz nor python3 is here to unpack $(basename "$f")" >&2
      return 1
    fi
  done
}
