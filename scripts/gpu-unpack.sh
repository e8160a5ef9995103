# Sourced by the GPU suite's scripts on the GPU machine (as .gpu/suite/unpack.sh): unpacks every
# pack of the suite (bins.tar.xz, or bins-tests.tar.xz and bins-bench.tar.xz of
# SUITE_SPLIT=1) into the binaries' folder, once per machine and pack, so a machine can be given
# the packs one after the other.
#     unpack_suite [SUITE [BIN]]
unpack_suite() {
  local suite=${1:-.gpu/suite} bin=${2:-/tmp/df11-suite-bin} pack sum mark
  mkdir -p "$bin"
  for pack in "$suite"/bins*.tar.xz; do
    [ -f "$pack" ] || continue
    sum=$(cksum < "$pack")
    mark="$bin/.pack-$(basename "$pack" .tar.xz)"
    [ "$(cat "$mark" 2> /dev/null)" = "$sum" ] && continue
    xz -T0 -dc "$pack" | tar xf - -C "$bin" && chmod +x "$bin"/* && echo "$sum" > "$mark"
  done
}
