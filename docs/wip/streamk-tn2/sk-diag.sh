#!/usr/bin/env bash
# Setup: mkdir -p build-ab-in && cp docs/wip/ab-many.sh docs/wip/streamk-tn2/* build-ab-in/; device call: bash build-ab-in/sk-diag.sh
# mm_tn2 (MN plain kernel) head vs streamk patch: SASS of the MN object, ncu sections of the
# isolated mm_tn2 node at shape 3 (head, patch off, patch on).
cd "$(dirname "$0")/.." || exit 1
export PATH="$PATH:/usr/local/cuda/bin"
out=${OUT:-/tmp}; t0=$(date +%s)
flags=(-DCMAKE_BUILD_TYPE=Release -DBITRANK_CUDA=ON -DBITRANK_NATIVE=OFF "-DBR_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a")
rm -rf build-sk-src && mkdir build-sk-src && tar --exclude='./build*' --exclude='./.git' -cf - . | tar -xf - -C build-sk-src
(cd build-sk-src && patch -p1 --forward < ../build-ab-in/streamk-tn2.patch) > $out/patch.log 2>&1 || { cat $out/patch.log; exit 1; }
cmake -S . -B build-h "${flags[@]}" > $out/bh.log 2>&1
cmake -S build-sk-src -B build-sk "${flags[@]}" > $out/bs.log 2>&1
cmake --build build-h -j8 --target bench_layer >> $out/bh.log 2>&1 &
cmake --build build-sk -j8 --target bench_layer >> $out/bs.log 2>&1 &
wait; echo "build: $(($(date +%s) - t0)) s"
for b in h sk; do o=$(find build-$b -name 'cuda_gemm_wgmma_mn.cu.o' | head -n1); cuobjdump --dump-sass $o | gzip > $out/sass-$b.txt.gz; done
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
prof() { local label=$1 b=$2; shift 2
  env "$@" timeout 150 "$ncu" --clock-control none --graph-profiling node --launch-skip 75 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,smsp__inst_executed.sum,sm__cycles_active.avg \
    $b --shape 3 > $out/ncu-$label.txt 2>&1
  echo "== $label"; grep -E "gpu__time_duration|dram__bytes_read|lts__t_sector_hit|smsp__inst_executed.sum|Stall|Registers Per|Block Limit|Duration|Compute \(SM\) Thr|Memory Thr|Issued Warp|No Eligible|wgmma_gemm_kernel" $out/ncu-$label.txt | head -40
}
prof head build-h/bench_layer
prof skoff build-sk/bench_layer BITRANK_MM_TN_STREAMK=0
prof skon build-sk/bench_layer
echo "total: $(($(date +%s) - t0)) s"
