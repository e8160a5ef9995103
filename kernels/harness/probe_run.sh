# Sourced by the probe build scripts (ring_probe.sh, tall_probe.sh, ss_probe.sh). write_cublas_run DIR BIN writes
# DIR/run.sh, which runs DIR/BIN with its arguments on the GPU machine, first finding libcublas.so.13 where the loader
# does not. BIN may be a default behind a variable ('${SS_BIN:-ss_probe}'), expanded when run.sh runs.
write_cublas_run() {
  local dir=$1 bin=$2
  cat > "$dir/run.sh" <<EOS
set -uo pipefail
HERE=\$(cd "\$(dirname "\$0")" && pwd)
if ldd "\$HERE/$bin" | grep -q 'libcublas.*not found'; then
  lib=\$(find / -name 'libcublas.so.13' 2>/dev/null | head -1)
  [ -n "\$lib" ] || { echo "libcublas.so.13 not found on this machine" >&2; exit 2; }
  export LD_LIBRARY_PATH="\$(dirname "\$lib")\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
fi
"\$HERE/$bin" "\$@"
EOS
}
