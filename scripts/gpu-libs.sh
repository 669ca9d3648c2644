# shellcheck shell=bash
# gpu-libs.sh: sourced by gpu-bundle.sh and gpu-check.sh. Which shared libraries a
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
