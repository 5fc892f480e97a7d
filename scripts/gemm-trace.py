"""Mean phase times per tile from a BR_WGMMA_TRACE dump (scripts/gemm-trace).

Each line: cta consumer tile, then clock64 stamps 0 start, 1 first stage landed,
2 main loop done, 3 c landed, 4 epilogue values written, 5 stores issued, and the
%globaltimer at the start (ns). Cycles become µs at the clock the stamps imply.
"""
import statistics as st
import sys

rows = [list(map(int, line.split())) for line in open(sys.argv[1]) if line.strip()]
by = {}
for r in rows:
    by.setdefault((r[0], r[1]), []).append(r)
rates = []  # cycles per ns between a consumer's first and last tile start
for ts in by.values():
    ts.sort(key=lambda r: r[2])
    if len(ts) > 1 and ts[-1][9] > ts[0][9]:
        rates.append((ts[-1][3] - ts[0][3]) / (ts[-1][9] - ts[0][9]))
ghz = st.median(rates) if rates else 1.98
names = ['wait first stage', 'main loop', 'wait c', 'epilogue math',
         'barrier+store issue', 'to next tile', 'epilogue (no stamps 3, 4)']
phases = {n: [] for n in names}
starts = []
for ts in by.values():
    for i, r in enumerate(ts):
        s = r[3:9]
        for p in range(5):  # phase p: stamp p to p + 1, where both were taken
            if s[p + 1] and (p == 0 or s[p]):
                phases[names[p]].append(s[p + 1] - s[p])
        if i + 1 < len(ts):
            phases[names[5]].append(ts[i + 1][3] - s[5])
        if s[2] and s[5] and not s[3] and not s[4]:  # epilogues without stamps 3, 4
            phases[names[6]].append(s[5] - s[2])
        if i == 0:
            starts.append(r[9])
print('  %d consumers, %d tiles, clock %.2f GHz, CTA starts within %.2f us'
      % (len(by), len(rows), ghz, (max(starts) - min(starts)) / 1e3))
total = 0.0
for n in names:
    v = phases[n]
    if not v:
        continue
    mean = st.mean(v) / ghz / 1e3
    total += mean
    print('  %-20s mean %7.3f us  median %7.3f  max %7.3f  (%d)'
          % (n, mean, st.median(v) / ghz / 1e3, max(v) / ghz / 1e3, len(v)))
print('  per tile %.3f us' % total)
