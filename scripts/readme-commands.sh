#!/usr/bin/env bash
# Runs every shell command that README.md shows, so that a README command that stops working
# fails CI (.ci/run).
#
#     bash scripts/readme-commands.sh [README]
#
# Commands are the lines starting with `cargo ` or `bash ` in README's indented (4-space) code
# blocks and its ```sh / ```bash blocks; a line ending with `\` is joined with the next, and a
# trailing `# comment` is dropped. Each command is run from the repository root and classified
# from its text:
#
#   SERVE             `df11 serve` on a local folder: started, must answer /health, stopped;
#   SKIP              `--features cuda`, `bash scripts/gpu-suite.sh`, `.gpu/...`: needs CUDA / a GPU;
#                     `cargo test --workspace`: .ci/run runs the test suite itself;
#                     `cargo bench`: the benches are long;
#                     `scripts/fuzz.sh`: .ci/run runs the fuzz smoke itself, long runs take hours.
#   EXPECT-HUB-ERROR  a model binary (a crate of models/) run without `--model-dir`, or with
#                     `--model-id`: it would download from the Hugging Face Hub. It runs with an
#                     empty HF_HUB_CACHE and HF_ENDPOINT on a closed port (no download is faked or
#                     made) and must exit non-zero saying the model is not in the Hugging Face cache
#                     (and, unless `--offline`, that the Hub is unreachable): the flags parse and
#                     the Hub path is wired.
#   RUN               everything else (`--open` dropped from `cargo doc`, paths under /tmp/ moved
#                     to a temporary folder): must exit 0.
#
# One line per command, then a summary; exits non-zero if any command fails (the end of its
# output is printed). A `cargo run` is built first with `cargo build` and the same arguments, so
# that a build failure shows as one and the Hub commands' time limit covers only the run. The
# programs build their shared dependencies with the same features (crates/workspace-hack), so
# each build after the first compiles only the program's own crates.
set -euo pipefail
cd "$(dirname "$0")/.."
readme=${1:-README.md}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS

# Extracts the commands: "<line>\t<command>" records, NUL-terminated.
extract() {
  python3 - "$1" <<'PY'
import re
import sys

SHELL_FENCES = {"sh", "bash", "shell"}


def strip_comment(line):
    """The line without a trailing `# comment` (a `#` starting a word, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
code = []  # (line number, text, block id) of every line of a shell code block
fence = None  # (marker, language) inside a fenced block
block = 0
indented = False
prev_blank = True
for no, line in enumerate(lines, 1):
    text = line.strip()
    if fence:
        if text.startswith(fence[0]) and not text.strip(fence[0][0]):
            fence = None
        elif fence[1] in SHELL_FENCES:
            code.append((no, text, block))
        prev_blank = False
        continue
    m = re.match(r"^ {0,3}(`{3,}|~{3,})\s*([A-Za-z0-9_+-]*)", line)
    if m:
        fence = (m.group(1), m.group(2).lower())
        block += 1
        indented = False
        prev_blank = False
        continue
    if text and line.startswith("    ") and (indented or prev_blank):
        if not indented:
            block += 1
        indented = True
        code.append((no, text, block))
    elif text:
        indented = False
    prev_blank = not text

i = 0
while i < len(code):
    no, text, blk = code[i]
    i += 1
    if not re.match(r"(cargo|bash) ", text):
        continue
    cmd = strip_comment(text)
    while cmd.endswith("\\") and i < len(code) and code[i][2] == blk:
        cmd = cmd[:-1].rstrip() + " " + strip_comment(code[i][1])
        i += 1
    sys.stdout.write(f"{no}\t{cmd}\0")
PY
}

# The class of a command, then a tab and the reason (for SKIP).
classify() {
  local c=$1 pkg=""
  if [[ $c == *"--features cuda"* || $c == *"scripts/gpu-suite.sh"* || $c == *".gpu/"* ]]; then
    printf 'SKIP\tneeds the CUDA toolkit and a GPU (the GPU suite runs it on the GPU machine)'
    return
  fi
  if [[ $c =~ ^cargo\ test( |$) && $c == *"--workspace"* ]]; then
    printf 'SKIP\tCI runs the test suite itself (.ci/run)'
    return
  fi
  if [[ $c =~ ^cargo\ bench( |$) ]]; then
    printf 'SKIP\tthe benches are long'
    return
  fi
  if [[ $c == *"scripts/fuzz.sh"* ]]; then
    printf 'SKIP\tCI runs the fuzz smoke itself (.ci/run); long fuzz runs take hours'
    return
  fi
  if [[ $c =~ ^cargo\ run\ .*(-p|--package)[\ =]([A-Za-z0-9_-]+) ]]; then
    pkg=${BASH_REMATCH[2]}
  fi
  local model_cmd=""
  [[ -n $pkg && -f models/$pkg/Cargo.toml ]] && model_cmd=1
  [[ $pkg == df11-cli && $c =~ \ --\ (run|chat|serve)( |$) ]] && model_cmd=1
  if [[ -n $model_cmd ]] && [[ $c != *"--model-dir"* || $c == *"--model-id"* ]]; then
    printf 'EXPECT-HUB-ERROR\t'
    return
  fi
  if [[ $pkg == df11-cli && $c =~ \ --\ serve( |$) ]]; then
    printf 'SERVE\t'
    return
  fi
  printf 'RUN\t'
}

records=()
while IFS= read -r -d '' rec; do
  records+=("$rec")
done < <(extract "$readme")
if [ ${#records[@]} -eq 0 ]; then
  echo "readme-commands: no command found in $readme" >&2
  exit 1
fi

echo "readme-commands: ${#records[@]} commands in $readme"

# `cargo build` with the arguments of a `cargo run` (those before ` -- `); nothing otherwise.
prebuild() {
  local c=$1 args
  [[ $c =~ ^cargo\ run( |$) ]] || return 0
  args=${c#cargo run}
  args=${args%% -- *}
  bash -c "cargo build $args"
}

# Prints the end of a failed command's output.
show_output() {
  echo "---- stdout (last 40 lines)"
  tail -n 40 "$1.out"
  echo "---- stderr (last 40 lines)"
  tail -n 40 "$1.err"
  echo "----"
}

ran=0 hub=0 skipped=0 failed=0 n=0
for rec in "${records[@]}"; do
  n=$((n + 1))
  line=${rec%%$'\t'*}
  cmd=${rec#*$'\t'}
  cls=$(classify "$cmd")
  kind=${cls%%$'\t'*}
  reason=${cls#*$'\t'}
  label=$(printf '%-17s %s:%s: %s' "$kind" "$readme" "$line" "$cmd")
  log="$tmp/$n"
  if [ "$kind" = SKIP ]; then
    skipped=$((skipped + 1))
    echo "$label: SKIP ($reason)"
    continue
  fi
  [[ $cmd =~ ^cargo\ doc ]] && cmd=$(sed -E 's/ --open( |$)/\1/g' <<<"$cmd")
  # Outputs under /tmp/ go to a fresh folder, so a second run does not find the first's files.
  mkdir -p "$tmp/out"
  cmd=${cmd// \/tmp\// $tmp\/out\/}
  t=$SECONDS
  if ! prebuild "$cmd" >"$log.out" 2>"$log.err" </dev/null; then
    failed=$((failed + 1))
    echo "$label: FAILED (does not build)"
    show_output "$log"
    continue
  fi
  build_s=$((SECONDS - t))
  t=$SECONDS
  rc=0
  if [ "$kind" = RUN ]; then
    bash -c "$cmd" >"$log.out" 2>"$log.err" </dev/null || rc=$?
    if [ "$rc" -eq 0 ]; then
      ran=$((ran + 1))
      echo "$label: OK (build ${build_s} s, run $((SECONDS - t)) s)"
    else
      failed=$((failed + 1))
      echo "$label: FAILED (exit $rc)"
      show_output "$log"
    fi
    continue
  fi
  if [ "$kind" = SERVE ]; then
    # A server: it must print its address and answer /health; then it is stopped.
    # Its own process group, so that stopping it stops cargo's child (the server) too.
    setsid bash -c "exec $cmd" >"$log.out" 2>"$log.err" </dev/null &
    pid=$!
    url=""
    for _ in $(seq 1 120); do
      url=$(grep -o 'listening on http://[^ ]*' "$log.err" | head -1 | sed 's/listening on //' || true)
      [ -n "$url" ] || ! kill -0 "$pid" 2>/dev/null && break
      sleep 0.5
    done
    health=""
    if [ -n "$url" ]; then health=$(curl -s --max-time 10 "$url/health" || true); fi
    kill -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    if [[ $health == *'"ok"'* ]]; then
      ran=$((ran + 1))
      echo "$label: OK (served $url, /health answered; build ${build_s} s)"
    else
      failed=$((failed + 1))
      echo "$label: FAILED (no answer on /health: url '$url', '$health')"
      show_output "$log"
    fi
    continue
  fi
  # EXPECT-HUB-ERROR: an empty cache, and the Hub on a closed port.
  mkdir -p "$tmp/hf-$n/hub"
  HF_HOME="$tmp/hf-$n" HF_HUB_CACHE="$tmp/hf-$n/hub" HF_ENDPOINT=http://127.0.0.1:9 \
    HF_HUB_OFFLINE=0 HF_TOKEN="" \
    timeout 300 bash -c "$cmd" >"$log.out" 2>"$log.err" </dev/null || rc=$?
  why=""
  if [ "$rc" -eq 0 ]; then
    why="exited 0 with an empty cache and no Hub"
  elif [ "$rc" -eq 124 ]; then
    why="timed out after 300 s"
  elif ! grep -q "is not in the Hugging Face cache" "$log.err"; then
    why="exit $rc without \"is not in the Hugging Face cache\""
  elif [[ $cmd != *"--offline"* ]] && ! grep -q "the Hub is unreachable" "$log.err"; then
    why="exit $rc without \"the Hub is unreachable\""
  fi
  if [ -z "$why" ]; then
    hub=$((hub + 1))
    if [[ $cmd == *"--offline"* ]]; then what="not in the HF cache"; else what="not in the HF cache, Hub unreachable"; fi
    echo "$label: OK (exit $rc: $what; build ${build_s} s, run $((SECONDS - t)) s)"
  else
    failed=$((failed + 1))
    echo "$label: FAILED ($why)"
    show_output "$log"
  fi
done

echo "readme-commands: $n commands: $ran run OK, $hub Hub errors as expected, $skipped skipped, $failed failed ($((SECONDS - start)) s)"
[ "$failed" -eq 0 ]
