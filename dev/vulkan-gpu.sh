#!/usr/bin/env bash
# The Vulkan backend on the lent NVIDIA GPU, through NVIDIA's Vulkan driver, in one
# device call (issue 26): evidence of the device (our own `bitrank devices`), the
# Vulkan test suites (ctest -L vulkan's, with their environment), bench_gemm_ops and
# bench_layer on --device vulkan:N, logs and JSON in $OUT, a short table last.
#
# The binaries are built here and carried: the device machine is bare (no Vulkan
# loader until .gl is unpacked, no OpenBLAS), and building there would spend device
# time. build-vkcarry is a release build for generic x86-64 (it runs on the device's
# CPU), CUDA off, Vulkan on, OpenBLAS and LAPACK off: the Vulkan suites need neither
# (the tests' CPU references then run the CPU backend's own loops), and OpenBLAS alone
# would be most of the carried bytes.
#
#   bash dev/vulkan-gpu.sh --build     # here: configure and build build-vkcarry
#   bash dev/vulkan-gpu.sh --here      # here: the whole run on lavapipe, --quick benches
#
# .gl once, here, as /work/.library/device/README.md says (the Vulkan loader and
# GLVND as Debian packages). Device call (run tool), carry [".gl", "build-vkcarry"]:
#
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash dev/vulkan-gpu.sh
#
# (the script unpacks .gl itself too, where no loader is installed; unpacking twice
# is harmless). Options: --device vulkan:N (default: the first Vulkan device that is
# a GPU; with --here, the first one), --runs N (the benchmarks' replays), --no-tests,
# --quick (the benchmarks' small shapes; implied by --here), --budget S (seconds for
# the whole run, default 540: the device tool stops a command at 600).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
bdir=$root/build-vkcarry
here=0 build=0 tests=1 quick=0 runs=20 device="" budget=540
while [ $# -gt 0 ]; do
  case "$1" in
    --here) here=1 quick=1 ;;
    --build) build=1 ;;
    --no-tests) tests=0 ;;
    --quick) quick=1 ;;
    --runs) runs=$2; shift ;;
    --device) device=$2; shift ;;
    --budget) budget=$2; shift ;;
    *) echo "usage: dev/vulkan-gpu.sh [--build | --here] [--device vulkan:N] [--runs N]" \
         "[--no-tests] [--quick] [--budget S]" >&2; exit 2 ;;
  esac
  shift
done

# The suites ctest labels vulkan, from the configured build: "name|binary|environment".
vulkan_suites() {
  sed -n 's/^add_test(\[=\[\(.*_vulkan\)\]=\] "\(.*\)")$/\1|\2/p' "$bdir/CTestTestfile.cmake" |
    while IFS='|' read -r name bin; do
      env=$(sed -n "s/^set_tests_properties(\[=\[$name\]=\] PROPERTIES  ENVIRONMENT \"\([^\"]*\)\".*/\1/p" \
        "$bdir/CTestTestfile.cmake")
      echo "$name|$(basename "$bin")|$env"
    done
}

if [ $build = 1 ]; then
  cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=OFF -DBITRANK_VULKAN=ON \
    -DBITRANK_NATIVE=OFF -DBR_OPENBLAS_LIB= -DBR_LAPACKE_LIB= >/dev/null || exit 1
  targets=(bitrank_cli bench_gemm_ops bench_layer)
  while IFS='|' read -r _ bin _; do targets+=("$bin"); done < <(vulkan_suites)
  cmake --build "$bdir" -j"$(nproc)" --target "${targets[@]}" || exit 1
  # OpenMP's runtime beside the binaries, for a device image without gcc's
  mkdir -p "$bdir/lib"
  gomp=$(ldd "$bdir/bench_layer" | sed -n 's/.*libgomp.so.1 => \([^ ]*\).*/\1/p')
  [ -n "$gomp" ] && cp -L "$gomp" "$bdir/lib/"
  echo "built: ${targets[*]}"
  du -sh "$bdir" "$root/.gl" 2>/dev/null
  exit 0
fi

out=${OUT:-$root/build-vk/vulkan-gpu-out}
mkdir -p "$out"
t_start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t_start) )); }
# timeout for a step: its cap, or what is left of the budget if less (at least 10 s)
cap() { local l; l=$(left); [ "$l" -lt "$1" ] && { [ "$l" -lt 10 ] && l=10; echo "$l"; } || echo "$1"; }
say() { echo "vulkan-gpu: $*" | tee -a "$out/devices.txt" >&2; }
: >"$out/devices.txt"

# ---------------------------------------------------------------- the binaries
missing=()
for b in bitrank bench_gemm_ops bench_layer; do [ -x "$bdir/$b" ] || missing+=("$b"); done
[ -f "$bdir/CTestTestfile.cmake" ] || missing+=(CTestTestfile.cmake)
if [ $tests = 1 ] && [ -f "$bdir/CTestTestfile.cmake" ]; then
  while IFS='|' read -r _ bin _; do [ -x "$bdir/$bin" ] || missing+=("$bin"); done < <(vulkan_suites)
fi
if [ ${#missing[@]} -gt 0 ]; then
  say "MISSING in build-vkcarry: ${missing[*]} (build them here with dev/vulkan-gpu.sh --build" \
      "and carry build-vkcarry)"
  exit 1
fi
say "binaries present in build-vkcarry (bitrank, bench_gemm_ops, bench_layer$( [ $tests = 1 ] && echo ", $(vulkan_suites | wc -l) Vulkan suites"))"

# ---------------------------------------------------------------- the Vulkan loader and driver
if [ $here = 0 ]; then
  if ldconfig -p | grep -q 'libvulkan.so.1 '; then
    say "a Vulkan loader is installed already: .gl not unpacked"
  elif ls "$root"/.gl/*.deb >/dev/null 2>&1; then
    for f in "$root"/.gl/*.deb; do dpkg -x "$f" / || say "dpkg -x $f failed"; done
    ldconfig
    say "unpacked $(ls "$root"/.gl/*.deb | wc -l) packages of .gl"
  else
    say "no Vulkan loader and no .gl to unpack (carry .gl)"
    exit 1
  fi
fi
# OpenMP's runtime: the system's, else the one --build put beside the binaries
if ldd "$bdir/bench_layer" | grep -q 'not found'; then
  export LD_LIBRARY_PATH="$bdir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH (libraries missing on this machine)"
fi

# The Vulkan devices our program sees; "usable" lines are br_ctx_device's
# "vulkan:N name (type, Vulkan x.y)".
list_devices() { "$bdir/bitrank" devices 2>&1; }
# (after the version: ", coopmat MxNxK" on a device with cooperative matrices,
# ", f32 subnormals flushed" on one that flushes them)
gpu_index() { sed -n 's/^vulkan:\([0-9]*\) .*(\(discrete\|integrated\|virtual\) GPU, Vulkan [0-9.]*\(, [^)]*\)\?)$/\1/p' | head -1; }
devs=$(list_devices)
nvidia_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ $here = 0 ] && [ -z "$(gpu_index <<<"$devs")" ] && [ -f "$nvidia_icd" ]; then
  # NVIDIA's driver lives under /usr/local/nvidia, where the loader does not look
  export VK_DRIVER_FILES=$nvidia_icd VK_ICD_FILENAMES=$nvidia_icd
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  say "no Vulkan GPU found: VK_DRIVER_FILES=$nvidia_icd"
  devs=$(list_devices)
fi
{
  echo "== uname -m: $(uname -m); nproc: $(nproc)"
  command -v nvidia-smi >/dev/null && { echo "== nvidia-smi -L"; nvidia-smi -L 2>&1; }
  echo "== Vulkan loader: $(ldconfig -p | grep 'libvulkan.so.1 ' | head -1 | sed 's/^[[:space:]]*//')"
  echo "== VK_DRIVER_FILES=${VK_DRIVER_FILES:-(unset)}"
  echo "== build-vkcarry/bitrank devices"
  echo "$devs"
} | tee -a "$out/devices.txt"
if [ -z "$device" ]; then
  idx=$(gpu_index <<<"$devs")
  if [ -z "$idx" ] && [ $here = 1 ]; then
    idx=$(sed -n 's/^vulkan:\([0-9]*\) .*(.*, Vulkan [0-9.]*\(, [^)]*\)\?)$/\1/p' <<<"$devs" | head -1)
  fi
  if [ -z "$idx" ]; then
    say "NO usable Vulkan GPU (see the device list above); nothing run"
    exit 1
  fi
  device=vulkan:$idx
fi
devname=$(grep "^$device " <<<"$devs" | head -1)
say "device under test: ${devname:-$device}"

# ---------------------------------------------------------------- the Vulkan test suites
tests_summary=""
if [ $tests = 1 ]; then
  : >"$out/tests.log"
  # The suites' share of the budget: the benchmarks come after them.
  t_tests_end=$(( $(date +%s) + budget * 55 / 100 ))
  while IFS='|' read -r name bin env; do
    t_left=$(( t_tests_end - $(date +%s) ))
    if [ "$t_left" -lt 10 ]; then
      tests_summary+="$(printf '%-28s %s' "$name" "NOT RUN (budget)")"$'\n'
      continue
    fi
    envs=()
    # a device that lists cooperative matrices must run their shader: a skip fails
    grep -q coopmat <<<"$devname" && envs+=(BITRANK_TEST_EXPECT_COOP=1)
    IFS=';' read -r -a kv <<<"$env"
    for e in "${kv[@]}"; do
      # the device under test in place of ctest's bare "vulkan"
      [ "${e%%=*}" = BITRANK_TEST_DEVICE ] && e=BITRANK_TEST_DEVICE=$device
      envs+=("$e")
    done
    t0=$(date +%s)
    echo "==== $name: ${envs[*]} $bin" >>"$out/tests.log"
    (cd "$root" && env "${envs[@]}" timeout "$t_left" "$bdir/$bin") >>"$out/tests.log" 2>&1
    rc=$?
    dt=$(( $(date +%s) - t0 ))
    case $rc in
      0) verdict=passed ;; 77) verdict="SKIPPED (77)" ;; 124) verdict="TIMEOUT" ;;
      *) verdict="FAILED (rc $rc)" ;;
    esac
    echo "==== $name: $verdict in ${dt} s" >>"$out/tests.log"
    tests_summary+="$(printf '%-28s %s in %d s' "$name" "$verdict" "$dt")"$'\n'
    printf '%-28s %s in %d s\n' "$name" "$verdict" "$dt" >&2
  done < <(vulkan_suites)
fi

# ---------------------------------------------------------------- the benchmarks
qflag=()
[ $quick = 1 ] && qflag=(--quick)
t0=$(date +%s)
timeout "$(cap 200)" "$bdir/bench_gemm_ops" --device "$device" --runs "$runs" "${qflag[@]}" \
  >"$out/gemm_ops.jsonl" 2>"$out/gemm_ops.log"
gemm_rc=$?
say "bench_gemm_ops rc $gemm_rc in $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
# the step as docs/PERFORMANCE.md's CUDA rows have it (x staged once, y* in f16), with
# the op profile of three eager steps on stderr; then the earlier definition (x staged
# by each step, y* in f32), its second row set, where time is left
timeout "$(cap 150)" "$bdir/bench_layer" --device "$device" --runs "$runs" --profile \
  "${qflag[@]}" >"$out/layer.jsonl" 2>"$out/layer.log"
layer_rc=$?
if [ $layer_rc = 0 ] && [ "$(left)" -gt 60 ]; then
  timeout "$(cap 90)" "$bdir/bench_layer" --device "$device" --runs "$runs" --stage-x \
    --target-f32 "${qflag[@]}" >>"$out/layer.jsonl" 2>>"$out/layer.log"
  layer_rc=$?
fi
say "bench_layer rc $layer_rc in $(( $(date +%s) - t0 )) s"

# ---------------------------------------------------------------- the table
{
  echo "== Vulkan on ${devname:-$device}; $(( $(date +%s) - t_start )) s in all"
  [ $tests = 1 ] && { echo "-- test suites (ctest -L vulkan's, BITRANK_TEST_DEVICE=$device)"; printf '%s' "$tests_summary"; }
  echo "-- bench_gemm_ops rc $gemm_rc, bench_layer rc $layer_rc"
  if command -v python3 >/dev/null; then
    python3 - "$out/gemm_ops.jsonl" "$out/layer.jsonl" "$root/docs/PERFORMANCE.md" <<'EOF'
import json, re, sys
def rows(path):
    try:
        return [json.loads(l) for l in open(path) if l.startswith("{")]
    except OSError:
        return []
# the CUDA figures beside ours, as docs/PERFORMANCE.md's tables have them
cuda_gemm, cuda_layer = {}, {}
try:
    for line in open(sys.argv[3]):
        c = [x.strip().strip("*").replace(" ms", "") for x in line.strip().strip("|").split("|")]
        if len(c) == 7 and re.fullmatch(r"\d+, \d+, \d+", c[0]):
            cuda_gemm[c[0]] = [re.sub(r"\s*\(.*", "", x).strip("*") for x in c[2:5]]
        if len(c) >= 3 and re.fullmatch(r"\d+, \d+, \d+, \d+, \d+", c[0]):
            cuda_layer[c[0]] = c[1]
except OSError:
    pass
g = rows(sys.argv[1])
if g:
    print("GEMM TFLOP/s (ms); CUDA: docs/PERFORMANCE.md's H200 figures, ours f16/rows/cols")
    shapes = list(dict.fromkeys((r["m"], r["n"], r["k"]) for r in g))
    variants = list(dict.fromkeys(r["variant"] for r in g))
    print("%-17s" % "M,N,K" + "".join(" %20s" % v for v in variants) + "   CUDA f16/rows/cols")
    for s in shapes:
        key = "%d, %d, %d" % s
        cells = []
        for v in variants:
            r = [x for x in g if (x["m"], x["n"], x["k"]) == s and x["variant"] == v]
            cells.append(" %20s" % ("%.2f (%.3f)" % (r[0]["tflops"], r[0]["ms"]) if r else "-"))
        print("%-17s" % ("%d,%d,%d" % s) + "".join(cells) + "   " + "/".join(cuda_gemm.get(key, ["-"])))
    # which shader each variant ran (br_ctx_last_kernel), so a fallback cannot pass unseen
    for v in variants:
        ks = list(dict.fromkeys(r.get("kernel", "?") for r in g if r["variant"] == v))
        print("  %s ran: %s" % (v, "; ".join(ks)))
lay = rows(sys.argv[2])
if lay:
    print("layer step ms (median of %d; CUDA: docs/PERFORMANCE.md's H200 step)" % lay[0]["runs"])
    for r in lay:
        key = "%d, %d, %d, %d, %d" % (r["m"], r["n"], r["r"], r["paths"], r["tokens"])
        x = "x once, y* f16" if r["x"] == "staged once" else "x/step, y* f32"
        print("  (m,n,r,P,T)=(%s) %-15s %10.4f ms  %7.3f TFLOP/s   CUDA %s ms" %
              (key.replace(" ", ""), x, r["median_ms"], r["tflops"],
               cuda_layer.get(key, "-") if r["x"] == "staged once" else "-"))
EOF
  else
    cat "$out/gemm_ops.jsonl" "$out/layer.jsonl"
  fi
} >"$out/summary.txt" 2>&1
echo
cat "$out/summary.txt"
[ $gemm_rc = 0 ] && [ $layer_rc = 0 ] && ! grep -q 'FAILED\|TIMEOUT' <<<"$tests_summary"
